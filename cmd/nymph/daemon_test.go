package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

func daemonEnv(t *testing.T, vars map[string]string) (*cliEnv, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errb bytes.Buffer
	if vars == nil {
		vars = map[string]string{}
	}
	if _, ok := vars["HOME"]; !ok {
		vars["HOME"] = t.TempDir() // never the real user's config
	}
	vars[cloudProbeEnv] = "off"
	return &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return vars[k] }, signals: make(chan os.Signal)}, &out, &errb
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDaemonPrintConfig(t *testing.T) {
	conf := writeFile(t, "d.toml", "[daemon]\nqueue = \"file\"\ntags = [\"a=b\"]\n[runtime]\nmax_invocations = 8.0\ncontainer_entry = [\"python3.12\", \"-m\", \"e\"]\n")
	env, out, errb := daemonEnv(t, map[string]string{"DREAMLAKE_QUEUE": "from-env"})
	code := runDaemon(context.Background(), env, []string{"--config", conf, "--print-config",
		"--server", "http://127.0.0.1:1", "--keep-alive", "0", "--log-format", "json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, want := range []string{"queue = 'from-env'", "tags = ['a=b']", "max_invocations = 8", "url = 'http://127.0.0.1:1'",
		"keep_alive_s = 0.0", "format = 'json'", "container_entry = ['python3.12', '-m', 'e']"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed config lacks %q:\n%s", want, out)
		}
	}
}

func TestDaemonConfigErrors(t *testing.T) {
	bad := writeFile(t, "bad.toml", "[runtime]\nmax_invocations = \"lots\"\n")
	env, _, errb := daemonEnv(t, nil)
	if code := runDaemon(context.Background(), env, []string{"--config", bad}); code != 1 ||
		!strings.Contains(errb.String(), "runtime.max_invocations") || !strings.Contains(errb.String(), bad) {
		t.Fatalf("type error: exit %d, %s", code, errb)
	}
	env, _, errb = daemonEnv(t, nil)
	if code := runDaemon(context.Background(), env, []string{"--nope"}); code != 2 {
		t.Fatalf("bad flag: exit %d, %s", code, errb)
	}
	unknown := writeFile(t, "u.toml", "[server]\ncolour = 1\n")
	env, _, errb = daemonEnv(t, nil)
	if code := runDaemon(context.Background(), env, []string{"--config", unknown, "--print-config"}); code != 0 {
		t.Fatalf("unknown key is not fatal: exit %d, %s", code, errb)
	}
}

func TestDaemonHelloRejectExits2(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.URL.Path != wire.PathHello || r.Header.Get("Authorization") != "Bearer secret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		b, _ := (&wire.HelloResponse{Reject: &wire.Reject{Code: wire.RejectEnrollTokenRequired, Message: "enroll first"}}).MarshalMsg(nil)
		w.Write(b)
	}))
	defer srv.Close()
	token := writeFile(t, "token", "secret\n")
	env, _, errb := daemonEnv(t, nil)
	code := runDaemon(context.Background(), env, []string{"--server", srv.URL, "--token-file", token,
		"--workdir", t.TempDir(), "--config", writeFile(t, "empty.toml", "")})
	if code != 2 || !strings.Contains(errb.String(), wire.RejectEnrollTokenRequired) {
		t.Fatalf("exit %d, stderr:\n%s", code, errb)
	}
	if strings.Contains(errb.String(), "secret") {
		t.Fatalf("the token leaked into the log:\n%s", errb)
	}
}

func TestDaemonRefusesATokenFileOthersCanAccess(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		token := writeFile(t, "token", "secret\n")
		os.Chmod(token, mode)
		env, _, errb := daemonEnv(t, nil)
		// A daemon that accepted the file would retry its hello until this ends.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := runDaemon(ctx, env, []string{"--server", "http://127.0.0.1:1", "--token-file", token,
			"--workdir", t.TempDir(), "--config", writeFile(t, "empty.toml", "")})
		cancel()
		want := fmt.Sprintf("token file %s has group or world access (mode %04o); chmod 600 %s", token, mode, token)
		if code != 1 || !strings.Contains(errb.String(), want) {
			t.Errorf("mode %04o: exit %d, stderr:\n%s\nwant %q", mode, code, errb, want)
		}
	}
}
