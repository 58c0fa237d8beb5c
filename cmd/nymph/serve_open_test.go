package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestListenIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8383": true, "127.1.2.3:8383": true, "[::1]:8383": true, "localhost:8383": true, "127.0.0.1:0": true,
		"0.0.0.0:8383": false, ":8383": false, "[::]:8383": false, "192.0.2.1:8383": false, "plane.example:8383": false,
		"localhost.example:8383": false, "127.0.0.1": false, "": false,
	} {
		if got := listenIsLoopback(addr); got != want {
			t.Errorf("listenIsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// runServeOnce listens on 127.0.0.1:0; an explicit --listen later on the
// command line wins.
func TestServeRefusesAnOpenNonLoopbackListen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runServeOnce(t, "--data-dir", dir, "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "is not a loopback address and no --token-file is given") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr := runServeOnce(t, "--data-dir", dir, "--listen", "0.0.0.0:0", "--insecure-no-daemon-auth")
	if code != 0 || !strings.Contains(stdout, "--insecure-no-daemon-auth: daemon routes on 0.0.0.0:0 accept requests without a bearer") {
		t.Fatalf("with --insecure-no-daemon-auth: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestServeCountsMustBePositive: --max-large-bodies and --max-workers
// refuse zero and a negative count, and take 1.
func TestServeCountsMustBePositive(t *testing.T) {
	for flag, refused := range map[string][]string{"--max-large-bodies": {"0", "-2"}, "--max-workers": {"0", "-1"}} {
		for _, n := range refused {
			code, _, stderr := runServeOnce(t, "--data-dir", t.TempDir(), flag, n)
			if code != 2 || !strings.Contains(stderr, flag+" "+n+": must be at least 1") {
				t.Errorf("%s %s: exit %d, stderr %q", flag, n, code, stderr)
			}
		}
		if code, _, stderr := runServeOnce(t, "--data-dir", filepath.Join(t.TempDir(), "data"), flag, "1"); code != 0 {
			t.Errorf("%s 1: exit %d, stderr %q", flag, code, stderr)
		}
	}
}
