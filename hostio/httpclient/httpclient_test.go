package httpclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/wire"
)

type seen struct {
	method, path, ct, accept, auth, sig string
	body                                []byte
}

func recorder(t *testing.T, status int, reply []byte) (*httptest.Server, chan seen) {
	t.Helper()
	ch := make(chan seen, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Accept"),
			r.Header.Get("Authorization"), r.Header.Get("X-LS-Signature"), b}
		w.Header().Set("Content-Type", wire.ContentTypeMsgpack)
		w.WriteHeader(status)
		w.Write(reply)
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func TestRoundTripHeadersAndBody(t *testing.T) {
	srv, ch := recorder(t, 200, []byte{0x80})
	c, err := New(Options{BaseURL: srv.URL + "/", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.RoundTrip(context.Background(), &transport.Request{
		Endpoint: wire.PathPoll, Body: []byte{0x81, 0xa1, 'a', 0x01},
		Headers: map[string]string{"X-LS-Signature": "sig", "Authorization": "Bearer evil"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := <-ch
	want := seen{"POST", "/v1/daemon/poll", wire.ContentTypeMsgpack, wire.ContentTypeMsgpack, "Bearer tok", "sig", []byte{0x81, 0xa1, 'a', 0x01}}
	if got.method != want.method || got.path != want.path || got.ct != want.ct || got.accept != want.accept ||
		got.auth != want.auth || got.sig != want.sig || !bytes.Equal(got.body, want.body) {
		t.Fatalf("server saw %+v, want %+v", got, want)
	}
	if resp.Status != 200 || !bytes.Equal(resp.Body, []byte{0x80}) || resp.ContentType != wire.ContentTypeMsgpack {
		t.Fatalf("response %+v", resp)
	}
}

func TestNon2xxIsAResponse(t *testing.T) {
	srv, ch := recorder(t, 422, []byte("bad"))
	c, err := New(Options{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	req := &transport.Request{Endpoint: wire.PathHello}
	resp, err := c.RoundTrip(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.auth != "" {
		t.Fatalf("no token configured but Authorization %q sent", got.auth)
	}
	if resp.Status != 422 || string(resp.Body) != "bad" {
		t.Fatalf("response %+v", resp)
	}
	if err := transport.Check(req, resp); err == nil {
		t.Fatal("Check accepted a 422")
	}
}

func TestLogChunkOctetStreamAndForeignOrigin(t *testing.T) {
	plane, planeCh := recorder(t, 200, nil)
	sink, sinkCh := recorder(t, 200, nil)
	c, err := New(Options{BaseURL: plane.URL, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	// A chunk URL on the plane's own origin carries the bearer.
	if _, err := c.RoundTrip(context.Background(), &transport.Request{
		Endpoint: plane.URL + "/v1/daemon/exec/e1/chunk", ContentType: wire.ContentTypeOctets, Body: []byte("out"),
	}); err != nil {
		t.Fatal(err)
	}
	got := <-planeCh
	if got.ct != wire.ContentTypeOctets || got.auth != "Bearer tok" || got.path != "/v1/daemon/exec/e1/chunk" || string(got.body) != "out" {
		t.Fatalf("plane saw %+v", got)
	}
	// A sink on another origin never sees it.
	if _, err := c.RoundTrip(context.Background(), &transport.Request{
		Endpoint: sink.URL + "/logs/e1", ContentType: wire.ContentTypeOctets, Body: []byte("x"),
	}); err != nil {
		t.Fatal(err)
	}
	if got := <-sinkCh; got.auth != "" || got.path != "/logs/e1" {
		t.Fatalf("foreign sink saw %+v", got)
	}
}

func TestURLJoin(t *testing.T) {
	for _, tc := range []struct{ base, ep, want string }{
		{"http://127.0.0.1:1", "/v1/daemon/poll", "http://127.0.0.1:1/v1/daemon/poll"},
		{"http://127.0.0.1:1/", "/v1/daemon/poll", "http://127.0.0.1:1/v1/daemon/poll"},
		{"http://127.0.0.1:1/api//", "v1/daemon/poll", "http://127.0.0.1:1/api/v1/daemon/poll"},
		{"http://127.0.0.1:1/api", "/v1/daemon/ack", "http://127.0.0.1:1/api/v1/daemon/ack"},
		{"http://127.0.0.1:1/api", "https://sink.example/x/chunk", "https://sink.example/x/chunk"},
	} {
		c, err := New(Options{BaseURL: tc.base})
		if err != nil {
			t.Fatal(err)
		}
		u, err := c.URL(tc.ep)
		if err != nil {
			t.Fatal(err)
		}
		if u.String() != tc.want {
			t.Errorf("URL(%q, %q) = %q, want %q", tc.base, tc.ep, u, tc.want)
		}
	}
}

func TestNewRejectsBadURLAndWarnsPlainHTTP(t *testing.T) {
	for _, bad := range []string{"", "ftp://x", "127.0.0.1:8080", "http://"} {
		if _, err := New(Options{BaseURL: bad}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if _, err := New(Options{BaseURL: "http://127.0.0.1:9", Log: log}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("loopback http warned: %s", buf.String())
	}
	if _, err := New(Options{BaseURL: "http://plane.example:80", Log: log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "plain http") {
		t.Fatalf("non-loopback http not warned: %q", buf.String())
	}
}

func TestTransportErrorAndCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.RoundTrip(ctx, &transport.Request{Endpoint: wire.PathPoll})
		done <- err
	}()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("cancelled poll returned no error")
	}
	srv.Close()
	if _, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: wire.PathPoll}); err == nil {
		t.Fatal("closed server returned no error")
	}
}

// redirector answers every request with a 307 to target.
func redirector(t *testing.T, target string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, target+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRedirectIsRefusedAndTheBearerStaysHome(t *testing.T) {
	// Same host, another port: Go's default policy would send the bearer.
	other, ch := recorder(t, 200, []byte{0x80})
	for _, tc := range []struct {
		name string
		hc   *http.Client
	}{{"default client", nil}, {"caller's client", &http.Client{}}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redirector(t, other.URL)
			c, err := New(Options{BaseURL: srv.URL, Token: "tok", HTTPClient: tc.hc})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.RoundTrip(context.Background(), &transport.Request{Endpoint: wire.PathPoll, Body: []byte{0x80}})
			select {
			case got := <-ch:
				t.Fatalf("the redirect was followed: the other port saw Authorization %q", got.auth)
			default:
			}
			if !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), "307 with Location "+other.URL+wire.PathPoll) {
				t.Fatalf("err = %v, want a refused redirect naming %s", err, other.URL)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// A Retry-After in whole seconds reaches the daemon core; a date, garbage
// or nothing is no wait.
func TestRetryAfter(t *testing.T) {
	for v, want := range map[string]time.Duration{"60": time.Minute, " 5 ": 5 * time.Second, "": 0, "soon": 0,
		"Wed, 21 Oct 2015 07:28:00 GMT": 0, "-3": 0, "99999999999": 0} {
		if got := retryAfter(v); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
}
