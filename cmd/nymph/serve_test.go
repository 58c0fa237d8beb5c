package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeMode writes a file in dir and sets its mode exactly, whatever the
// umask.
func writeMode(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// runServeOnce runs serve with a context that is already over, so a serve
// that gets past its checks returns at once instead of serving.
func runServeOnce(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(string) string { return "" }, signals: make(chan os.Signal)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code := runServe(ctx, env, append([]string{"--listen", "127.0.0.1:0", "--store", "memory"}, args...))
	return code, out.String(), errb.String()
}

func TestServeRefusesTokenFilesOthersCanAccess(t *testing.T) {
	for _, flagName := range []string{"--token-file", "--relay-token-file", "--admin-token-file"} {
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
			dir := t.TempDir()
			tok := writeMode(t, dir, "tok", "secret-"+flagName, mode)
			data := filepath.Join(dir, "data")
			code, _, errText := runServeOnce(t, "--data-dir", data, flagName, tok)
			want := fmt.Sprintf("token file %s has group or world access (mode %04o); chmod 600 %s", tok, mode, tok)
			if code != 1 || !strings.Contains(errText, want) {
				t.Errorf("%s mode %04o: exit %d, stderr %q; want %q", flagName, mode, code, errText, want)
			}
		}
		// The other side of the rule: owner-only is accepted.
		dir := t.TempDir()
		tok := writeMode(t, dir, "tok", "secret-"+flagName, 0o600)
		if code, _, errText := runServeOnce(t, "--data-dir", filepath.Join(dir, "data"), flagName, tok); code != 0 {
			t.Errorf("%s mode 0600: exit %d, stderr %q", flagName, code, errText)
		}
	}
}

func TestServeRefusesAnAdminTokenADaemonHolds(t *testing.T) {
	dir := t.TempDir()
	daemon := writeMode(t, dir, "daemon.token", "shared-secret\n", 0o600)
	relay := writeMode(t, dir, "relay.token", "relay-secret\n", 0o600)
	sameAsDaemon := writeMode(t, dir, "admin-daemon.token", "  shared-secret", 0o600)
	sameAsRelay := writeMode(t, dir, "admin-relay.token", "relay-secret", 0o600)
	own := writeMode(t, dir, "admin.token", "admin-secret", 0o600)
	for _, tc := range []struct {
		admin, flagName, path string
	}{{sameAsDaemon, "--token-file", daemon}, {sameAsRelay, "--relay-token-file", relay}} {
		code, _, errText := runServeOnce(t, "--data-dir", filepath.Join(dir, "data"),
			"--token-file", daemon, "--relay-token-file", relay, "--admin-token-file", tc.admin)
		want := fmt.Sprintf("the admin token (%s) is also the token of %s %s", tc.admin, tc.flagName, tc.path)
		if code != 1 || !strings.Contains(errText, want) || !strings.Contains(errText, "a token of its own") {
			t.Errorf("admin = %s: exit %d, stderr %q; want %q", tc.flagName, code, errText, want)
		}
	}
	code, out, errText := runServeOnce(t, "--data-dir", filepath.Join(dir, "data"),
		"--token-file", daemon, "--relay-token-file", relay, "--admin-token-file", own)
	if code != 0 || !strings.Contains(out, "admin token from "+own) {
		t.Errorf("distinct tokens: exit %d, stdout %q, stderr %q", code, out, errText)
	}
}

func TestServeDataDirectoryIsPrivate(t *testing.T) {
	root := t.TempDir()
	fresh := filepath.Join(root, "fresh", "data")
	if code, _, errText := runServeOnce(t, "--data-dir", fresh); code != 0 {
		t.Fatalf("fresh data dir: exit %d, %s", code, errText)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("created data dir: %v %v, want 0700", st.Mode(), err)
	}
	for _, mode := range []os.FileMode{0o755, 0o750, 0o710, 0o701} {
		os.Chmod(fresh, mode)
		code, _, errText := runServeOnce(t, "--data-dir", fresh)
		want := fmt.Sprintf("data directory %s has group or world access (mode %04o); chmod 700 %s", fresh, mode, fresh)
		if code != 1 || !strings.Contains(errText, want) {
			t.Errorf("mode %04o: exit %d, stderr %q; want %q", mode, code, errText, want)
		}
	}
	os.Chmod(fresh, 0o700)
	if code, _, errText := runServeOnce(t, "--data-dir", fresh); code != 0 {
		t.Errorf("back to 0700: exit %d, %s", code, errText)
	}
	// The generated admin token is the owner's only.
	if st, err := os.Stat(filepath.Join(fresh, adminTokenFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("generated admin token: %v %v, want 0600", st.Mode(), err)
	}
}

func TestServeRefusesABadTokenBeforeCreatingTheDataDirectory(t *testing.T) {
	dir := t.TempDir()
	tok := writeMode(t, dir, "tok", "secret", 0o644)
	data := filepath.Join(dir, "data")
	if code, _, _ := runServeOnce(t, "--data-dir", data, "--token-file", tok); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data directory was created before the token was checked: %v", err)
	}
}
