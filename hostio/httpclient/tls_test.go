package httpclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/wire"
)

// tlsServer is an https server presenting a certificate of a CA made in a
// fresh directory, as nymph serve does.
func tlsServer(t *testing.T) (*httptest.Server, *tlsca.Authority) {
	t.Helper()
	a, err := tlsca.Ensure(filepath.Join(t.TempDir(), "tls"), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.ContentTypeMsgpack)
		w.Write([]byte{0x80})
	}))
	srv.TLS = a.ServerConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, a
}

func TestTLSVerifiesTheServer(t *testing.T) {
	srv, a := tlsServer(t)
	poll := &transport.Request{Endpoint: wire.PathPoll, Body: []byte{0x80}}

	c, err := New(Options{BaseURL: srv.URL, CAFile: a.CAPath()})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := c.RoundTrip(context.Background(), poll); err != nil || resp.Status != 200 {
		t.Fatalf("with serve's CA: %v %+v", err, resp)
	}

	// The system roots do not know serve's CA; the error says what to pass.
	sys, err := New(Options{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.RoundTrip(context.Background(), poll); err == nil || !strings.Contains(err.Error(), "--ca-file") {
		t.Fatalf("system roots: %v", err)
	}

	_, other := tlsServer(t)
	wrong, err := New(Options{BaseURL: srv.URL, CAFile: other.CAPath()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.RoundTrip(context.Background(), poll); err == nil || !strings.Contains(err.Error(), "not signed by a CA this client trusts") {
		t.Fatalf("another CA: %v", err)
	}

	// A join's pinned configuration replaces the CA file.
	pin, err := tlsca.NewPinned(a.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := New(Options{BaseURL: srv.URL, TLS: pin.Config("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pinned.RoundTrip(context.Background(), poll); err != nil {
		t.Fatalf("pinned: %v", err)
	}
	if _, ok := pin.CA(); !ok {
		t.Error("pinned: no CA handed back")
	}

	if _, err := New(Options{BaseURL: srv.URL, CAFile: filepath.Join(t.TempDir(), "absent.crt")}); err == nil || !strings.Contains(err.Error(), "absent.crt") {
		t.Errorf("absent CA file: %v", err)
	}
}
