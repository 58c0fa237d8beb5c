//go:build unix

package relay

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/instancelock"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/wire"
)

// servePlane is the fake plane behind TLS with a certificate of a CA made
// as nymph serve makes its own.
func servePlane(t *testing.T) (*fakePlane, *tlsca.Authority) {
	t.Helper()
	a, err := tlsca.Ensure(filepath.Join(t.TempDir(), "tls"), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakePlane{}
	fp.Server = httptest.NewUnstartedServer(http.HandlerFunc(fp.serve))
	fp.TLS = a.ServerConfig()
	fp.StartTLS()
	t.Cleanup(fp.Close)
	return fp, a
}

func readUpstreamFile(t *testing.T, prefix string) wire.RelayUpstream {
	t.Helper()
	path := filepath.Join(prefix, wire.RelayUpstreamFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %04o, want 0644", path, st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	ru, err := wire.ParseRelayUpstream(data)
	if err != nil {
		t.Fatal(err)
	}
	return ru
}

// TestTLSUpstream: with serve's CA file the relay carries frames to an
// https upstream and writes the CA's fingerprint for the daemons behind
// it; without it the system's roots refuse the upstream, and the daemon
// hears which file to pass.
func TestTLSUpstream(t *testing.T) {
	fp, a := servePlane(t)
	rl, d := relayOnOnePair(t, fp.URL, func(c *Config) { c.CAFile = a.CAPath() })
	reply := decodeReply(t, d.roundTrip(t, envelope(t, wire.PathPoll, "r1", []byte("x"))))
	if reply.Status != 200 || string(reply.Body) != "echo:x" {
		t.Fatalf("through TLS: %+v", reply)
	}
	ru := readUpstreamFile(t, rl.root.path)
	if ru.Server != fp.URL || ru.CAFingerprint != a.Fingerprint() {
		t.Errorf("upstream file %+v, want %s and %s", ru, fp.URL, a.Fingerprint())
	}
	entries, _ := os.ReadDir(rl.root.path)
	if len(entries) != 3 {
		t.Errorf("prefix holds %d entries, want m1, %s and %s (no temporary left)", len(entries), wire.RelayUpstreamFile, instancelock.FileName)
	}

	rl, d = relayOnOnePair(t, fp.URL, nil)
	reply = decodeReply(t, d.roundTrip(t, envelope(t, wire.PathPoll, "r2", []byte("x"))))
	if reply.Status != 0 || reply.RelayError == nil || !strings.Contains(reply.RelayError.Message, "--ca-file") {
		t.Errorf("system roots: %+v", reply)
	}
	if ru := readUpstreamFile(t, rl.root.path); ru.CAFingerprint != "" {
		t.Errorf("system roots: fingerprint %q, want none", ru.CAFingerprint)
	}
}

// A plain http upstream is pinned by nothing.
func TestUpstreamFilePlainHTTP(t *testing.T) {
	fp := newFakePlane(t)
	rl, _ := relayOnOnePair(t, fp.URL, nil)
	if ru := readUpstreamFile(t, rl.root.path); ru.Server != fp.URL || ru.CAFingerprint != "" {
		t.Errorf("upstream file %+v", ru)
	}
}

func TestBadCAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(path, []byte("not a certificate"), 0o644)
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("t\n"), 0o600)
	if _, err := New(Config{Prefix: t.TempDir(), Upstream: "https://127.0.0.1:1", TokenFile: tok, CAFile: path}); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a bad CA file: %v", err)
	}
}
