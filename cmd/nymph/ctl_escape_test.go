package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// hostileLabel sets the terminal's title and clears the screen.
const hostileLabel = "\x1b]0;pwned\x07\x1b[2J"

// colouredOutput is what a remote command may legitimately print.
const colouredOutput = "\x1b[31mred\x1b[0m\r\n"

// hostilePlane is a control plane that puts escapes in every string it
// sends, and colours an exec's output.
func hostilePlane(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	errText := "bad\x1b[2J"
	switch p := r.URL.Path; {
	case p == operator.PathWorkers:
		reply(200, []operator.Worker{{ID: "w1", MachineID: "box", Label: hostileLabel, State: "active",
			Capabilities: wire.Capabilities{Runners: []string{"process\x1b[8m"}}}})
	case p == "/v1/admin/workers/w1/exec":
		reply(200, operator.ExecAccepted{ExecID: "e1", CommandID: "c1\x1b[2J"})
	case p == "/v1/admin/workers/w1/reset":
		reply(200, operator.CommandAccepted{CommandID: "c2\x07", WorkerID: "w1\x1b]0;x\x07"})
	case p == "/v1/admin/execs/e1/logs" && r.URL.Query().Get("offset") == "0":
		reply(200, operator.LogsPage{Data: []byte(colouredOutput), NextOffset: int64(len(colouredOutput))})
	case p == "/v1/admin/execs/e1/logs":
		reply(200, operator.LogsPage{Offset: int64(len(colouredOutput)), NextOffset: int64(len(colouredOutput)), Done: true})
	case p == "/v1/admin/execs/e1":
		reply(200, operator.ExecStatus{ExecID: "e1", State: "finished",
			Result: &wire.ExecResult{ExitCode: 3, Error: &errText}})
	case p == "/v1/admin/invocations/i1":
		reply(200, operator.Invocation{ID: "i1", State: "failed\x1b[5m",
			Error: &wire.ErrorInfo{TypeName: "Boom\x1b[31m", Message: "msg\x1b[2J"}})
	default:
		reply(404, operator.Error{Error: "no route\x1b[2J\x1b]0;owned\x07"})
	}
}

func runHostileCtl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(hostilePlane))
	t.Cleanup(srv.Close)
	var out, errb bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			return map[string]string{"NYMPH_SERVER": srv.URL, "NYMPH_ADMIN_TOKEN": "tok"}[k]
		},
		signals: make(chan os.Signal)}
	code := runCtl(context.Background(), env, args)
	return code, out.String(), errb.String()
}

func TestCtlEscapesWhatTheServerSays(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // escaped, on stdout or stderr
	}{
		{[]string{"workers"}, 0, `\x1b]0;pwned\a\x1b[2J`},
		{[]string{"reset", "w1"}, 0, `queued reset_backoff c2\a for worker w1\x1b]0;x\a`},
		{[]string{"invocations", "i1"}, 0, `error: Boom\x1b[31m: msg\x1b[2J`},
		{[]string{"invocations", "nope"}, 1, `404 no route\x1b[2J\x1b]0;owned\a`},
		{[]string{"exec", "w1", "--", "true"}, 3, `exec e1: bad\x1b[2J`},
	} {
		code, out, errText := runHostileCtl(t, tc.args...)
		all := out + errText
		if tc.args[0] == "exec" {
			// The remote command's own output is handed on byte for byte.
			if out != colouredOutput {
				t.Errorf("exec output = %q, want %q untouched", out, colouredOutput)
			}
			all = errText
		}
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("ctl %v: exit %d, output %q; want exit %d and %q", tc.args, code, all, tc.code, tc.want)
		}
		if strings.ContainsAny(all, "\x1b\x07") {
			t.Errorf("ctl %v: a control character reached the terminal: %q", tc.args, all)
		}
	}
}
