package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// ctlServer records operator requests and answers them like serve would.
type ctlServer struct {
	mu       sync.Mutex
	requests []string
	bodies   map[string][]byte
	exitCode int64
}

func (s *ctlServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path)
	var body bytes.Buffer
	body.ReadFrom(r.Body)
	s.bodies[r.URL.Path] = body.Bytes()
	reply := func(v any) { json.NewEncoder(w).Encode(v) }
	switch {
	case r.Header.Get("Authorization") != "Bearer tok":
		w.WriteHeader(401)
		reply(operator.Error{Error: "admin token required"})
	case r.URL.Path == "/v1/admin/workers":
		reply([]operator.Worker{{ID: "w1", MachineID: "box", Label: "the box", State: "active"}})
	case r.URL.Path == "/v1/admin/workers/nope/exec":
		w.WriteHeader(404)
		reply(operator.Error{Error: "unknown worker nope"})
	case strings.HasSuffix(r.URL.Path, "/exec"):
		reply(operator.ExecAccepted{ExecID: "e1", CommandID: "c1"})
	case r.URL.Path == "/v1/admin/execs/e1/logs":
		if r.URL.Query().Get("offset") == "0" {
			reply(operator.LogsPage{Data: []byte("remote says hi\n"), NextOffset: 15})
			return
		}
		reply(operator.LogsPage{Offset: 15, NextOffset: 15, Done: true})
	case r.URL.Path == "/v1/admin/execs/e1":
		reply(operator.ExecStatus{ExecID: "e1", State: "finished", Result: &wire.ExecResult{ExitCode: wire.Int(s.exitCode)}})
	default:
		reply(operator.CommandAccepted{CommandID: "c2", WorkerID: "w1"})
	}
}

func runCtlTest(t *testing.T, s *ctlServer, stdin string, args ...string) (int, string, string) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	var out, errb bytes.Buffer
	env := &cliEnv{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			return map[string]string{"NYMPH_SERVER": srv.URL, "NYMPH_ADMIN_TOKEN": "tok"}[k]
		},
		signals: make(chan os.Signal),
	}
	code := runCtl(context.Background(), env, args)
	return code, out.String(), errb.String()
}

func newCtlServer() *ctlServer { return &ctlServer{bodies: map[string][]byte{}} }

func TestCtlExecExitCodeEnvStdin(t *testing.T) {
	s := newCtlServer()
	s.exitCode = 42
	code, out, errText := runCtlTest(t, s, "piped", "exec", "--env", "A=1", "w1", "--env", "B=x=y", "--stdin", "-", "--timeout", "1m", "--", "echo", "-n", "$A")
	if code != 42 || out != "remote says hi\n" {
		t.Fatalf("code=%d out=%q err=%q", code, out, errText)
	}
	var req operator.ExecRequest
	json.Unmarshal(s.bodies["/v1/admin/workers/w1/exec"], &req)
	if req.Command != "echo -n $A" || req.Env["A"] != "1" || req.Env["B"] != "x=y" || *req.Stdin != "piped" || *req.TimeoutS != 60 || !req.Stream {
		t.Fatalf("exec request = %+v", req)
	}
}

func TestCtlExecSentinels(t *testing.T) {
	s := newCtlServer()
	s.exitCode = -2
	code, _, errText := runCtlTest(t, s, "", "exec", "w1", "sleep", "9")
	if code != 124 || !strings.Contains(errText, "timed out") {
		t.Fatalf("timeout: code=%d err=%q", code, errText)
	}
	s.exitCode = -1
	code, _, errText = runCtlTest(t, s, "", "exec", "w1", "x")
	if code != 125 || !strings.Contains(errText, "could not run") {
		t.Fatalf("spawn failure: code=%d err=%q", code, errText)
	}
}

func TestCtlServerErrors(t *testing.T) {
	code, _, errText := runCtlTest(t, newCtlServer(), "", "exec", "nope", "true")
	if code != 1 || !strings.Contains(errText, "404 unknown worker nope") {
		t.Fatalf("code=%d err=%q", code, errText)
	}
	code, _, errText = runCtlTest(t, newCtlServer(), "", "--admin-token", "bad", "reset", "w1")
	if code != 1 || !strings.Contains(errText, "401 admin token required") {
		t.Fatalf("bad token: code=%d err=%q", code, errText)
	}
}

func TestCtlUsageErrorsSendNothing(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"frobnicate"},
		{"exec"},
		{"exec", "w1"},
		{"exec", "--timeout", "soon", "w1", "true"},
		{"exec", "--env", "NOEQUALS", "w1", "true"},
		{"setup", "w1"},
		{"setup", "w1", "--script", filepath.Join(dir, "missing.sh")},
		{"hibernate", "w1"},
		{"hibernate", "w1", "--until", "tomorrow"},
		{"update", "w1", "--version", "1.2", "--url", "https://x/nymph", "--sha256", "abc"},
		{"update", "w1", "--version", "1.2", "--url", "https://x/nymph", "--sha256", strings.Repeat("g", 64)},
		{"update", "w1", "--version", "1.2", "--url", "file:///x", "--sha256", strings.Repeat("a", 64)},
		{"run", "--queue", "q"},
		{"run", "--run-config", `{"runner":"slurm","slurm":{"partion":"gpu"}}`},
		{"run", "--run-config", `{"runner":"slurm"} {}`},
		{"run", "--run-config", `["slurm"]`},
		{"run", "--run-config", "@" + filepath.Join(dir, "missing.json")},
		{"run", "--run-config", `{"image":"x"}`},
		{"reset"},
		{"reset", "w1", "extra"},
		{"workers", "--bogus"},
	} {
		s := newCtlServer()
		code, _, errText := runCtlTest(t, s, "", args...)
		if code != 2 || errText == "" {
			t.Errorf("%v: code=%d stderr=%q, want 2 and a message", args, code, errText)
		}
		if len(s.requests) != 0 {
			t.Errorf("%v: sent %v before checking arguments", args, s.requests)
		}
	}
}

func TestCtlHibernateUntil(t *testing.T) {
	s := newCtlServer()
	before := time.Now()
	code, out, errText := runCtlTest(t, s, "", "hibernate", "w1", "--until", "+90s")
	if code != 0 {
		t.Fatalf("code=%d err=%q", code, errText)
	}
	var req operator.HibernateRequest
	json.Unmarshal(s.bodies["/v1/admin/workers/w1/hibernate"], &req)
	got := time.Unix(int64(req.UntilEpochS), 0)
	if got.Before(before.Add(89*time.Second)) || got.After(time.Now().Add(91*time.Second)) {
		t.Fatalf("until = %v, want about now+90s", got)
	}
	if !strings.Contains(out, "queued hibernate c2") {
		t.Fatalf("out = %q", out)
	}
	code, _, _ = runCtlTest(t, s, "", "hibernate", "w1", "--until", "2030-01-02T03:04:05Z")
	json.Unmarshal(s.bodies["/v1/admin/workers/w1/hibernate"], &req)
	if code != 0 || int64(req.UntilEpochS) != time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Unix() {
		t.Fatalf("RFC 3339 until: code=%d until=%v", code, req.UntilEpochS)
	}
}

func TestCtlSetupAndUpdateBodies(t *testing.T) {
	s := newCtlServer()
	script := filepath.Join(t.TempDir(), "s.sh")
	os.WriteFile(script, []byte("echo hi\n"), 0o600)
	if code, _, e := runCtlTest(t, s, "", "setup", "w1", "--script", script, "--sudo", "--refresh-capabilities", "--name", "base"); code != 0 {
		t.Fatalf("setup: %d %s", code, e)
	}
	var setup operator.SetupRequest
	json.Unmarshal(s.bodies["/v1/admin/workers/w1/setup"], &setup)
	if setup != (operator.SetupRequest{Script: "echo hi\n", Sudo: true, RefreshCapabilities: true, Name: "base"}) {
		t.Fatalf("setup body = %+v", setup)
	}
	sum := strings.Repeat("AB", 32)
	if code, _, e := runCtlTest(t, s, "", "update", "w1", "--version", "9.9", "--url", "https://example.invalid/n", "--sha256", sum); code != 0 {
		t.Fatalf("update: %d %s", code, e)
	}
	var up operator.UpdateRequest
	json.Unmarshal(s.bodies["/v1/admin/workers/w1/update"], &up)
	if up.SHA256 != strings.ToLower(sum) || up.Version != "9.9" {
		t.Fatalf("update body = %+v", up)
	}
}

func TestCtlResolvesMachineIDAndLabel(t *testing.T) {
	for _, ref := range []string{"box", "the box", "w1"} {
		s := newCtlServer()
		if code, _, e := runCtlTest(t, s, "", "reset", ref); code != 0 {
			t.Fatalf("reset %q: %d %s", ref, code, e)
		}
		if _, ok := s.bodies["/v1/admin/workers/w1/reset"]; !ok {
			t.Errorf("reset %q went to %v, want worker w1", ref, s.requests)
		}
	}
	s := newCtlServer()
	code, out, _ := runCtlTest(t, s, "", "exec", "--detach", "box", "true")
	if code != 0 || out != "e1\n" {
		t.Fatalf("exec --detach: code=%d out=%q", code, out)
	}
	code, out, _ = runCtlTest(t, s, "", "wait", "box", "--state", "active", "--timeout", "5s")
	if code != 0 || !strings.Contains(out, "worker w1 is active") {
		t.Fatalf("wait: code=%d out=%q", code, out)
	}
	code, _, errText := runCtlTest(t, s, "", "wait", "box", "--state", "lost", "--timeout", "0.3")
	if code != 1 || !strings.Contains(errText, "is active, not lost") {
		t.Fatalf("wait timeout: code=%d err=%q", code, errText)
	}
}

func TestCtlRunConfig(t *testing.T) {
	s := newCtlServer()
	file := filepath.Join(t.TempDir(), "rc.json")
	os.WriteFile(file, []byte(`{"runner": "slurm", "image": "from-file",
		"slurm": {"partition": "gpu", "nodes": 2, "ntasks-per-node": "4", "poll_interval_s": 0.5},
		"kube": {"pvc": "shared"}}`), 0o600)
	if code, _, e := runCtlTest(t, s, "", "run", "--run-config", "@"+file, "--image", "bb:latest"); code != 0 {
		t.Fatalf("run: %d %s", code, e)
	}
	var req operator.RunRequest
	if err := json.Unmarshal(s.bodies["/v1/admin/invocations"], &req); err != nil {
		t.Fatal(err)
	}
	rc := req.RunConfig
	if rc.Runner != "slurm" || rc.Image != "bb:latest" || rc.Slurm == nil || rc.Kube == nil {
		t.Fatalf("run_config = %+v", rc)
	}
	if rc.Slurm.Partition != "gpu" || rc.Slurm.Nodes != "2" || rc.Slurm.NtasksPerNode != "4" ||
		rc.Slurm.PollIntervalS == nil || *rc.Slurm.PollIntervalS != 0.5 || rc.Kube.PVC != "shared" {
		t.Fatalf("slurm = %+v, kube = %+v", rc.Slurm, rc.Kube)
	}

	// --runner overrides the JSON's runner; the JSON may come on stdin.
	s = newCtlServer()
	if code, _, e := runCtlTest(t, s, `{"runner":"docker","docker":{"network":"none"}}`, "run", "--run-config", "@-", "--runner", "gvisor"); code != 0 {
		t.Fatalf("run: %d %s", code, e)
	}
	req = operator.RunRequest{}
	json.Unmarshal(s.bodies["/v1/admin/invocations"], &req)
	if req.RunConfig.Runner != "gvisor" || req.RunConfig.Docker == nil || req.RunConfig.Docker.Network != "none" {
		t.Fatalf("run_config = %+v", req.RunConfig)
	}

	// A misspelt key is named in the error.
	s = newCtlServer()
	code, _, e := runCtlTest(t, s, "", "run", "--run-config", `{"runner":"kube","kube":{"pvcs":"x"}}`)
	if code != 2 || !strings.Contains(e, `"pvcs"`) {
		t.Fatalf("code=%d stderr=%q, want 2 naming the key", code, e)
	}
}

func TestCtlAdminTokenFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "admin.token")
	os.WriteFile(tok, []byte("tok\n"), 0o600)
	if code, out, errText := runCtlTest(t, newCtlServer(), "", "--admin-token=", "--admin-token-file", tok, "workers"); code != 0 || !strings.Contains(out, "the box") {
		t.Fatalf("0600: exit %d, out %q, err %q", code, out, errText)
	}
	os.Chmod(tok, 0o640)
	s := newCtlServer()
	code, _, errText := runCtlTest(t, s, "", "--admin-token=", "--admin-token-file", tok, "workers")
	want := "token file " + tok + " has group or world access (mode 0640); chmod 600 " + tok
	if code != 1 || !strings.Contains(errText, want) || len(s.requests) != 0 {
		t.Fatalf("0640: exit %d, err %q, requests %v; want %q and nothing sent", code, errText, s.requests, want)
	}
}

// runRequest is the RunRequest ctl run sent to s.
func runRequest(t *testing.T, s *ctlServer) operator.RunRequest {
	t.Helper()
	var req operator.RunRequest
	if err := json.Unmarshal(s.bodies["/v1/admin/invocations"], &req); err != nil {
		t.Fatalf("run request: %v", err)
	}
	return req
}

func TestCtlRunScriptAndFunction(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		script *string
		fn     wire.Function
	}{
		{[]string{"--script", "hostname"}, ptrTo("hostname"), wire.Function{}},
		{[]string{"--script", "hostname", "--module", "m", "--qualname", "q"}, ptrTo("hostname"), wire.Function{Module: "m", Qualname: "q"}},
		{nil, nil, wire.Function{Module: "__main__", Qualname: "main"}},
		{[]string{"--module", "pkg.mod"}, nil, wire.Function{Module: "pkg.mod", Qualname: "main"}},
	} {
		s := newCtlServer()
		args := append([]string{"run", "--runner", "process"}, tc.args...)
		if code, _, e := runCtlTest(t, s, "", args...); code != 0 {
			t.Fatalf("%v: %d %s", args, code, e)
		}
		req := runRequest(t, s)
		if diff := cmpDiffJSON(t, tc.script, req.Script); diff != "" {
			t.Errorf("%v: script %s", args, diff)
		}
		if req.Function != tc.fn {
			t.Errorf("%v: function %+v, want %+v", args, req.Function, tc.fn)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// cmpDiffJSON compares two values by their JSON: "" when they are alike.
func cmpDiffJSON(t *testing.T, want, got any) string {
	t.Helper()
	w, _ := json.Marshal(want)
	g, _ := json.Marshal(got)
	if bytes.Equal(w, g) {
		return ""
	}
	return "got " + string(g) + ", want " + string(w)
}

func TestCtlRunArgs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.json")
	os.WriteFile(file, []byte(`{"from": "file"}`), 0o600)
	for _, tc := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"--arg", "name=ada", "--arg", "n=3", "--arg", "empty=", "--arg", "eq=a=b"}, "", `{"empty":"","eq":"a=b","n":"3","name":"ada"}`},
		{[]string{"--arg", "k=1", "--arg", "k=2"}, "", `{"k":"2"}`},
		{[]string{"--arg-json", `{"n": 3, "f": 1.5, "e": 1e3, "big": 18446744073709551616, "l": [true, null, "s"], "m": {"x": -1}, "a": "json"}`, "--arg", "a=flag"}, "",
			`{"a":"flag","big":18446744073709552000,"e":1000,"f":1.5,"l":[true,null,"s"],"m":{"x":-1},"n":3}`},
		{[]string{"--arg-json", "@" + file}, "", `{"from":"file"}`},
		{[]string{"--arg-json", "@-"}, `{"from": "stdin"}`, `{"from":"stdin"}`},
		{[]string{"--arg-json", `{}`}, "", `{}`},
	} {
		s := newCtlServer()
		args := append([]string{"run", "--runner", "process"}, tc.args...)
		if code, _, e := runCtlTest(t, s, tc.stdin, args...); code != 0 {
			t.Fatalf("%v: %d %s", args, code, e)
		}
		got, ok := resultJSON(runRequest(t, s).ArgsBlob)
		if !ok || got != tc.want {
			t.Errorf("%v: args.msgpack as JSON %q (ok %v), want %q", args, got, ok, tc.want)
		}
	}
	// No arguments: no args_blob at all.
	s := newCtlServer()
	if code, _, e := runCtlTest(t, s, "", "run", "--runner", "process", "--script", "true"); code != 0 {
		t.Fatalf("%d %s", code, e)
	}
	if b := runRequest(t, s).ArgsBlob; len(b) != 0 {
		t.Fatalf("args_blob %q, want none", b)
	}
}

func TestCtlRunEnv(t *testing.T) {
	// docker and gvisor: run_config.docker.env, --env over the JSON's.
	for _, runner := range []string{"docker", "gvisor"} {
		s := newCtlServer()
		code, _, e := runCtlTest(t, s, "", "run", "--runner", runner, "--image", "img", "--run-config", `{"docker": {"env": {"A": "json", "B": "json"}, "network": "none"}}`,
			"--env", "A=flag", "--env", "C=it's")
		if code != 0 {
			t.Fatalf("%s: %d %s", runner, code, e)
		}
		req := runRequest(t, s)
		if d := req.RunConfig.Docker; d == nil || d.Network != "none" || cmpDiffJSON(t, map[string]string{"A": "flag", "B": "json", "C": "it's"}, d.Env) != "" || req.Script != nil {
			t.Fatalf("%s: run_config %+v", runner, req.RunConfig)
		}
	}
	// The other runners: exported before the script, whatever the kind.
	for _, runner := range []string{"process", "subprocess", "slurm", "kube"} {
		s := newCtlServer()
		code, _, e := runCtlTest(t, s, "", "run", "--runner", runner, "--script", "echo $B", "--env", "B=it's b", "--env", "A=1")
		if code != 0 {
			t.Fatalf("%s: %d %s", runner, code, e)
		}
		req := runRequest(t, s)
		if want := "export A='1' B='it'\\''s b'\necho $B"; req.Script == nil || *req.Script != want || req.RunConfig.Docker != nil {
			t.Fatalf("%s: script %q, want %q", runner, ptrOr(req.Script), want)
		}
	}
}

func ptrOr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func TestCtlRunUsageErrors(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args.bin")
	os.WriteFile(args, []byte("x"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runner", "process", "--script", ""}, "--script needs a command"},
		{[]string{"--runner", "process", "--script", "  "}, "--script needs a command"},
		{[]string{"--runner", "process", "--args", args, "--arg", "a=b"}, "not with --arg"},
		{[]string{"--runner", "process", "--args", args, "--arg-json", "{}"}, "not with --arg"},
		{[]string{"--runner", "process", "--arg", "noequals"}, "want K=V"},
		{[]string{"--runner", "process", "--arg", "=v"}, "want K=V"},
		{[]string{"--runner", "process", "--arg-json", "[1]"}, "not a JSON object"},
		{[]string{"--runner", "process", "--arg-json", "null"}, "not a JSON object"},
		{[]string{"--runner", "process", "--arg-json", `{"a":1} {}`}, "trailing data"},
		{[]string{"--runner", "process", "--arg-json", "@" + filepath.Join(dir, "missing.json")}, "--arg-json"},
		{[]string{"--runner", "process", "--env", "A=1"}, "no environment for the process runner"},
		{[]string{"--runner", "slurm", "--env", "A=1"}, "no environment for the slurm runner"},
		{[]string{"--runner", "kube", "--env", "A=1"}, "no environment for the kube runner"},
		{[]string{"--runner", "process", "--script", "true", "--env", "A-B=1"}, "not a name a shell can export"},
	} {
		s := newCtlServer()
		code, _, errText := runCtlTest(t, s, "", append([]string{"run"}, tc.args...)...)
		if code != 2 || !strings.Contains(errText, tc.want) {
			t.Errorf("%v: code=%d stderr=%q, want 2 and %q", tc.args, code, errText, tc.want)
		}
		if len(s.requests) != 0 {
			t.Errorf("%v: sent %v before checking arguments", tc.args, s.requests)
		}
	}
}

// runWaitTest runs ctl run --wait against a server that queues the run as
// i1 and answers it ended as end.
func runWaitTest(t *testing.T, end operator.Invocation, args ...string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inv := operator.Invocation{ID: "i1", Queue: "default", Runner: "process", State: "queued"}
		if r.Method == http.MethodGet && r.URL.Path == "/v1/admin/invocations/i1" {
			inv = end
			inv.ID, inv.Queue, inv.Runner = "i1", "default", "process"
		}
		json.NewEncoder(w).Encode(inv)
	}))
	t.Cleanup(srv.Close)
	var out, errb bytes.Buffer
	env := &cliEnv{
		stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			return map[string]string{"NYMPH_SERVER": srv.URL, "NYMPH_ADMIN_TOKEN": "tok"}[k]
		},
		signals: make(chan os.Signal),
	}
	code := runCtl(context.Background(), env, append([]string{"run", "--runner", "process", "--wait"}, args...))
	if !strings.Contains(errb.String(), "queued invocation i1 on default; waiting") {
		t.Errorf("stderr %q", errb.String())
	}
	return code, out.String()
}

func TestCtlRunWaitSaysHowItEnded(t *testing.T) {
	code, out := runWaitTest(t, operator.Invocation{State: "succeeded", WorkerID: "w1"}, "--script", "hostname")
	if want := "invocation i1 succeeded on w1\nexit status 0\nthe script's output is in the daemon log on w1\n"; code != 0 || out != want {
		t.Errorf("script succeeded: %d %q, want 0 %q", code, out, want)
	}
	code, out = runWaitTest(t, operator.Invocation{State: "failed", WorkerID: "w1",
		Error: &wire.ErrorInfo{TypeName: "ScriptFailed", Message: "exit status 3"}}, "--script", "exit 3")
	if want := "invocation i1 failed on w1\nerror: ScriptFailed: exit status 3\nthe script's output is in the daemon log on w1\n"; code != 1 || out != want {
		t.Errorf("script failed: %d %q, want 1 %q", code, out, want)
	}
	// An entry program's result that is a msgpack map is shown as JSON.
	blob := []byte{0x81, 0xa8, 'g', 'r', 'e', 'e', 't', 'i', 'n', 'g', 0xa2, 'h', 'i', 0x1b}
	code, out = runWaitTest(t, operator.Invocation{State: "succeeded", WorkerID: "w1", ResultBlob: blob[:len(blob)-1]})
	if want := "invocation i1 succeeded on w1\nresult: 13 bytes\nresult as JSON: {\"greeting\":\"hi\"}\n"; code != 0 || out != want {
		t.Errorf("entry: %d %q, want 0 %q", code, out, want)
	}
	// Raw bytes, a bare scalar or trailing bytes: the size only.
	for _, b := range [][]byte{[]byte("computed in a pod"), {0x05}, blob} {
		_, out = runWaitTest(t, operator.Invocation{State: "succeeded", WorkerID: "w1", ResultBlob: b})
		if strings.Contains(out, "as JSON") {
			t.Errorf("%q shown as JSON: %q", b, out)
		}
	}
	// --json prints the invocation only.
	code, out = runWaitTest(t, operator.Invocation{State: "succeeded", WorkerID: "w1"}, "--script", "true", "--json")
	if code != 0 || strings.Contains(out, "exit status") || !strings.Contains(out, `"state": "succeeded"`) {
		t.Errorf("--json: %d %q", code, out)
	}
}
