package httpclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Directly, Get is a GET with the given headers and no credential; the
// body is bounded by limit, announced or not.
func TestDownloadsGetDirect(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet || r.Header.Get("Authorization") != "":
			http.Error(w, "want a GET without credentials", http.StatusBadRequest)
		case r.URL.Path == "/chunked":
			w.(http.Flusher).Flush() // no Content-Length
			w.Write(data)
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "/blob", http.StatusFound)
		case r.URL.Query().Get("sig") != "ok" || r.Header.Get("X-Blob") != "yes":
			http.Error(w, "bad signature", http.StatusForbidden)
		default:
			w.Write(data)
		}
	}))
	defer srv.Close()
	d, err := NewDownloads(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hdr := map[string]string{"X-Blob": "yes"}

	body, n, err := d.Get(ctx, srv.URL+"/blob?sig=ok", hdr, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(got, data) || n != int64(len(data)) {
		t.Fatalf("Get: %d bytes (length %d), err %v", len(got), n, err)
	}

	if _, _, err := d.Get(ctx, srv.URL+"/blob?sig=bad", hdr, 1<<20); err == nil ||
		!strings.Contains(err.Error(), "status 403: bad signature") || strings.Contains(err.Error(), "sig=bad") {
		t.Errorf("bad signature: err %v, want the status without the query", err)
	}
	if _, _, err := d.Get(ctx, srv.URL+"/blob?sig=ok", hdr, 10); err == nil || !strings.Contains(err.Error(), "1000 bytes, over the 10-byte limit") {
		t.Errorf("announced over limit: err %v", err)
	}
	body, n, err = d.Get(ctx, srv.URL+"/chunked", nil, 999)
	if err != nil || n != -1 {
		t.Fatalf("chunked: length %d, err %v", n, err)
	}
	got, err = io.ReadAll(body)
	body.Close()
	if err == nil || !strings.Contains(err.Error(), "over the 999-byte limit") || len(got) != 999 {
		t.Errorf("chunked over limit: %d bytes, err %v", len(got), err)
	}
	if _, _, err := d.Get(ctx, srv.URL+"/moved", nil, 1<<20); !errors.Is(err, ErrRedirect) {
		t.Errorf("redirect: err %v, want it refused", err)
	}
	if _, _, err := d.Get(ctx, "ftp://host/x", nil, 1); err == nil {
		t.Error("an ftp URL was fetched")
	}
}

// fakeRelay records what a relayed transport is asked and answers it.
type fakeRelay struct {
	reqs []*transport.Request
	resp transport.Response
	err  error
}

func (f *fakeRelay) CanWithdraw() bool { return false }

func (f *fakeRelay) RoundTrip(_ context.Context, req *transport.Request) (*transport.Response, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	r := f.resp
	return &r, nil
}

// Through a relay, Get is a POST of the URL's path under the control
// plane's, its query in X-LS-Download-Query, and only for the control
// plane's origin.
func TestDownloadsGetThroughARelay(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		server, url string
		endpoint    string
		query       string
		headers     map[string]string
		refusal     string // a refusal before anything is sent
	}{
		{server: "https://plane:8383", url: "https://plane:8383/v1/blobs/ns/k/1?exp=1&size=2&sig=abc",
			endpoint: "/v1/blobs/ns/k/1", query: "exp=1&size=2&sig=abc"},
		{server: "https://PLANE:443/", url: "https://plane/v1/releases/nymph-linux-amd64-1.0.0",
			endpoint: "/v1/releases/nymph-linux-amd64-1.0.0"},
		{server: "https://plane/api/", url: "https://plane/api/v1/blobs/ns/k#frag",
			endpoint: "/v1/blobs/ns/k"},
		{server: "https://plane:8383", url: "https://plane:8383/v1/blobs/ns/k?sig=x",
			headers: map[string]string{"X-LS-Blob-Token": "t"}, endpoint: "/v1/blobs/ns/k", query: "sig=x"},

		{server: "https://plane:8383", url: "https://bucket.example/ns/k?sig=x", refusal: "not on the control plane's origin https://plane:8383"},
		{server: "https://plane:8383", url: "http://plane:8383/v1/blobs/ns/k", refusal: "not on the control plane's origin"},
		{server: "https://plane:8383", url: "https://plane:8384/v1/blobs/ns/k", refusal: "not on the control plane's origin"},
		{server: "https://plane/api", url: "https://plane/other/v1/blobs/ns/k", refusal: `outside the control plane's path "/api/"`},
		{server: "https://plane:8383", url: "https://plane:8383/v1/blobs/ns/k?sig=x",
			headers: map[string]string{"Range": "bytes=0-1"}, refusal: "header Range would not pass a relay"},
	} {
		d, err := NewDownloads(tc.server, "")
		if err != nil {
			t.Fatal(err)
		}
		relay := &fakeRelay{resp: transport.Response{Status: 200, Body: []byte("bytes")}}
		body, n, err := d.Through(relay).Get(ctx, tc.url, tc.headers, 1<<20)
		if tc.refusal != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refusal) || !strings.Contains(err.Error(), "nothing was sent") {
				t.Errorf("%s: err %v, want %q", tc.url, err, tc.refusal)
			}
			if len(relay.reqs) != 0 {
				t.Errorf("%s: sent through the relay", tc.url)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		got, _ := io.ReadAll(body)
		body.Close()
		if string(got) != "bytes" || n != 5 {
			t.Errorf("%s: body %q length %d", tc.url, got, n)
		}
		req := relay.reqs[0]
		if req.Endpoint != tc.endpoint || len(req.Body) != 0 || req.Headers[wire.HeaderDownloadQuery] != tc.query {
			t.Errorf("%s: sent %+v, want endpoint %s and query %q", tc.url, req, tc.endpoint, tc.query)
		}
		if _, has := req.Headers[wire.HeaderDownloadQuery]; has != (tc.query != "") {
			t.Errorf("%s: query header present %v", tc.url, has)
		}
		for k, v := range tc.headers {
			if req.Headers[k] != v {
				t.Errorf("%s: header %s = %q, want %q", tc.url, k, req.Headers[k], v)
			}
		}
	}
}

// The relay's answers: a non-200 is an error naming the status and the
// endpoint, a relay's own refusal (400 with no body) says so, a failed
// trip is wrapped, and a body over limit is refused.
func TestDownloadsGetThroughARelayErrors(t *testing.T) {
	d, err := NewDownloads("https://plane:8383", "")
	if err != nil {
		t.Fatal(err)
	}
	const u = "https://plane:8383/v1/blobs/ns/k?exp=1&size=0&sig=abc"
	for _, tc := range []struct {
		relay fakeRelay
		limit int64
		want  string
	}{
		{fakeRelay{resp: transport.Response{Status: 404, Body: []byte("no such blob\n")}}, 100,
			"POST /v1/blobs/ns/k through the relay (download of https://plane:8383/v1/blobs/ns/k?…): status 404: no such blob"},
		{fakeRelay{resp: transport.Response{Status: 403, Body: []byte("URL expired")}}, 100, "status 403: URL expired"},
		{fakeRelay{resp: transport.Response{Status: 400, Body: []byte{}}}, 100, "status 400: refused by the relay"},
		{fakeRelay{err: errors.New("no relay is reading")}, 100, "POST /v1/blobs/ns/k through the relay (download of https://plane:8383/v1/blobs/ns/k?…): no relay is reading"},
		{fakeRelay{resp: transport.Response{Status: 200, Body: make([]byte, 101)}}, 100, "101 bytes, over the 100-byte limit"},
	} {
		relay := tc.relay
		_, _, err := d.Through(&relay).Get(context.Background(), u, nil, tc.limit)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want %q", err, tc.want)
		}
		if strings.Contains(err.Error(), "sig=") {
			t.Errorf("the error shows the signature: %v", err)
		}
	}
}

// A server this client cannot verify: the error explains it, and does not
// show the URL's query.
func TestDownloadsGetUntrusted(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	d, err := NewDownloads(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = d.Get(context.Background(), srv.URL+"/v1/blobs/ns/k?sig=secret", nil, 1)
	if err == nil || !strings.Contains(err.Error(), "not signed by a CA this client trusts") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("err %v", err)
	}
}
