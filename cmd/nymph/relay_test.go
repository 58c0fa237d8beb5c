package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// nymph relay --log-level takes the daemon's level names, the config
// file's alias included, and refuses anything else (slog's own forms such
// as "info+2" among them) naming the choices, before the relay starts.
func TestRelayLogLevel(t *testing.T) {
	run := func(level string) (int, string) {
		var out, errb bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		// A token file that does not exist stops the relay once its flags
		// and logger are settled, so nothing is left running.
		code := runRelay(context.Background(), env, []string{"--prefix", t.TempDir(), "--upstream", "http://127.0.0.1:1",
			"--token-file", filepath.Join(t.TempDir(), "missing"), "--log-level", level})
		return code, errb.String()
	}
	for _, level := range []string{"info+2", "trace", "warning+1", ""} {
		code, stderr := run(level)
		want := `nymph relay: --log-level "` + level + `": want debug, info, warn or error`
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("--log-level %q: exit %d, stderr:\n%s\nwant exit 2 and %q", level, code, stderr, want)
		}
	}
	for _, level := range []string{"warning", "WARN", "error"} {
		if code, stderr := run(level); code == 2 || strings.Contains(stderr, "--log-level") || strings.Contains(stderr, "level=INFO") {
			t.Errorf("--log-level %q: exit %d, stderr:\n%s\nwant the level taken and info not logged", level, code, stderr)
		}
	}
	if code, stderr := run("Info"); code == 2 || !strings.Contains(stderr, "level=INFO") {
		t.Errorf("--log-level Info: exit %d, stderr:\n%s\nwant the level taken and info logged", code, stderr)
	}
}
