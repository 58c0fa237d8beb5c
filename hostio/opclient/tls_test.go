package opclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/operator"
)

func TestTLSVerifiesTheServer(t *testing.T) {
	a, err := tlsca.Ensure(filepath.Join(t.TempDir(), "tls"), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([]operator.Worker{})
	}))
	srv.TLS = a.ServerConfig()
	srv.StartTLS()
	defer srv.Close()
	ctx := context.Background()

	c, err := NewWithCA(srv.URL, "tok", a.CAPath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Workers(ctx); err != nil {
		t.Fatalf("with serve's CA: %v", err)
	}
	ca, err := c.ServerCA(ctx)
	if err != nil || tlsca.Fingerprint(ca) != a.Fingerprint() {
		t.Fatalf("ServerCA: %v", err)
	}

	sys, err := New(srv.URL, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Workers(ctx); err == nil || !strings.Contains(err.Error(), "--ca-file") {
		t.Fatalf("system roots: %v", err)
	}
	plain, _ := New("http://127.0.0.1:1", "tok", nil)
	if _, err := plain.ServerCA(ctx); err == nil {
		t.Error("a plain http server has a CA")
	}
}
