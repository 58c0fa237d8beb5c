package doctor

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// plane serves /healthz and /v1/daemon/event over TLS from a CA of its
// own; refuse, when set, is the {error} a signed event is refused with.
func testPlane(t *testing.T, refuse string) (*httptest.Server, *tlsca.Authority) {
	t.Helper()
	ca, err := tlsca.Ensure(filepath.Join(t.TempDir(), "tls"), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("POST "+wire.PathEvent, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(identity.HeaderKeyID) == "" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if refuse != "" {
			body, _ := (&wire.ValidationError{Error: refuse, Message: "signed long ago"}).MarshalMsg(nil)
			w.WriteHeader(http.StatusUnauthorized)
			w.Write(body)
			return
		}
		w.Write([]byte{0x80})
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = ca.ServerConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, ca
}

func server(url, caFile string) Server {
	return Server{URL: url, CAFile: caFile, URLSetting: "[server] url", CASetting: "[server] ca_file", Check: "server-reachable"}
}

func run(f func(context.Context) Result) Result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f(ctx)
}

func wantResult(t *testing.T, what string, r Result, status Status, reason ...string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: %s %q (fix %q); want %s", what, r.Status, r.Reason, r.Fix, status)
	}
	for _, w := range reason {
		if !strings.Contains(r.Reason, w) {
			t.Errorf("%s: %q does not say %q", what, r.Reason, w)
		}
	}
	if status != StatusOK && status != StatusSkip && r.Fix == "" {
		t.Errorf("%s: %s without a fix", what, status)
	}
}

func TestAHealthyServer(t *testing.T) {
	srv, ca := testPlane(t, "")
	s := server(srv.URL, ca.CAPath())
	wantResult(t, "reachable", run(s.Reachable()), StatusOK, "/healthz: 200")
	wantResult(t, "tls", run(s.TLS()), StatusOK, "verifies by "+ca.CAPath(), "CA fingerprint "+ca.Fingerprint())
	wantResult(t, "clock", run(s.Clock()), StatusOK, "within")
}

func TestAWrongCANamesBothFingerprints(t *testing.T) {
	srv, ca := testPlane(t, "")
	other, err := tlsca.Ensure(filepath.Join(t.TempDir(), "tls"), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := server(srv.URL, other.CAPath())
	r := run(s.TLS())
	wantResult(t, "tls", r, StatusFail, "presents CA "+ca.Fingerprint(), "does not verify by "+other.CAPath()+" ("+other.Fingerprint()+")")
	if !strings.Contains(r.Fix, "--ca-file") {
		t.Errorf("fix %q does not name the CA file to pass", r.Fix)
	}
	// The others point to the TLS check rather than fail again.
	wantResult(t, "reachable", run(s.Reachable()), StatusSkip, "see server-tls")
	wantResult(t, "clock", run(s.Clock()), StatusSkip, "see server-tls")
}

func TestAServerDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + l.Addr().String()
	l.Close()
	s := server(url, "")
	wantResult(t, "reachable", run(s.Reachable()), StatusFail, "connection refused")
	wantResult(t, "tls", run(s.TLS()), StatusSkip, "see server-reachable")
	wantResult(t, "clock", run(s.Clock()), StatusSkip, "see server-reachable")
}

func TestClockSkew(t *testing.T) {
	srv, ca := testPlane(t, "")
	for _, tc := range []struct {
		off    time.Duration
		status Status
		says   string
	}{
		{-2 * time.Second, StatusOK, "within"},
		{20 * time.Second, StatusWarn, "ahead of the server's"},
		{-90 * time.Second, StatusFail, "behind the server's"},
	} {
		s := server(srv.URL, ca.CAPath())
		s.Now = func() time.Time { return time.Now().Add(tc.off) }
		wantResult(t, tc.off.String(), run(s.Clock()), tc.status, tc.says)
	}
}

func TestSignedRequest(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "identity.key")
	if err := os.WriteFile(keyFile, identity.EncodeSeed(key), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, ca := testPlane(t, "")
	s := server(srv.URL, ca.CAPath())
	wantResult(t, "accepted", run(s.Signed(true, keyFile, "")), StatusOK, "accepted", "signed by "+identity.KeyID(key.Public().(ed25519.PublicKey)))
	wantResult(t, "disabled", run(s.Signed(false, keyFile, "")), StatusSkip)
	wantResult(t, "no key", run(s.Signed(true, keyFile+".absent", "")), StatusSkip, "see identity-key")

	refusing, ca2 := testPlane(t, plane.ErrSignatureExpired)
	r := run(server(refusing.URL, ca2.CAPath()).Signed(true, keyFile, ""))
	wantResult(t, "refused", r, StatusFail, "refused 401 signature_expired: signed long ago")
	if !strings.Contains(r.Fix, "clock") {
		t.Errorf("fix of an expired signature: %q", r.Fix)
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantResult(t, "private token", run(TokenFile("[server] token_file", tok, "none")), StatusOK)
	wantResult(t, "no token file", run(TokenFile("[server] token_file", "", "none given")), StatusSkip, "none given")
	if err := os.Chmod(tok, 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(TokenFile("[server] token_file", tok, ""))
	wantResult(t, "shared token", r, StatusFail, "mode 0644")
	if r.Fix != "chmod 600 "+tok {
		t.Errorf("fix %q", r.Fix)
	}
	wantResult(t, "missing token", run(TokenFile("t", filepath.Join(dir, "absent"), "")), StatusFail, "does not exist")

	key := filepath.Join(dir, "identity.key")
	if err := os.WriteFile(key, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantResult(t, "bad key", run(IdentityKey(true, key)), StatusFail, "does not decode")
	wantResult(t, "no identity", run(IdentityKey(false, "")), StatusSkip)

	wantResult(t, "workdir", run(Workdir(dir)), StatusOK, "is writable")
	wantResult(t, "workdir to be made", run(Workdir(filepath.Join(dir, "a", "b"))), StatusWarn, "does not exist yet")
	wantResult(t, "workdir a file", run(Workdir(tok)), StatusFail, "not a directory")
	wantResult(t, "workdir under a file", run(Workdir(filepath.Join(tok, "w"))), StatusFail)
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("the workdir check created a directory")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("the workdir check left files behind: %v", ents)
	}

	wantResult(t, "free", run(Instance(dir, "daemon state directory", "hint", "daemon")), StatusOK, "is free")
	wantResult(t, "absent", run(Instance(filepath.Join(dir, "x"), "daemon state directory", "hint", "daemon")), StatusSkip)
}

func TestToolCheck(t *testing.T) {
	found := func(string) (string, error) { return "/bin/tool", nil }
	missing := func(string) (string, error) { return "", os.ErrNotExist }
	version := func(v string) func(context.Context, string) string {
		return func(context.Context, string) string { return v }
	}
	wantResult(t, "ok", run(ToolCheck(Tool{Name: "tool", Version: version("1.2")}, found)), StatusOK, "1.2 at /bin/tool")
	wantResult(t, "bash missing", run(ToolCheck(Tool{Name: "bash", Required: true}, missing)), StatusFail)
	wantResult(t, "needed, missing", run(ToolCheck(Tool{Name: "docker", NeededBy: "the docker runner"}, missing)), StatusWarn, "the docker runner needs it")
	wantResult(t, "unneeded, missing", run(ToolCheck(Tool{Name: "sbatch"}, missing)), StatusSkip)
	wantResult(t, "needed, no version", run(ToolCheck(Tool{Name: "docker", NeededBy: "the docker runner", Version: version("")}, found)), StatusWarn)
	wantResult(t, "unneeded, no version", run(ToolCheck(Tool{Name: "docker", Version: version("")}, found)), StatusSkip)
}
