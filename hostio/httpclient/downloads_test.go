package httpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
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

// relayRefusal is a relay's own refusal (a status and a message, no
// upstream body) as a relayed transport hands it on: frame's parse of an
// id reply or, raw, of a relay_error map.
func relayRefusal(t *testing.T, raw bool, status int, message string) transport.Response {
	t.Helper()
	var r frame.Reply
	var err error
	if raw {
		payload, _ := (&wire.RelayErrorReply{RelayError: wire.RelayFailure{Status: wire.Int(status), Message: message}}).MarshalMsg(nil)
		r, err = frame.ParseRawReply(payload)
	} else {
		payload, _ := (&wire.RelayReply{ID: "01J.1", Status: wire.Int(status), RelayError: &wire.RelayReplyError{Message: message}}).MarshalMsg(nil)
		var mine bool
		if r, mine, err = frame.ParseReply(payload, "01J.1"); !mine {
			t.Fatal("the reply is not the request's")
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return transport.Response{Status: r.Status, Body: r.Body}
}

// planeRefusal is a control plane's own refusal body, msgpack or JSON, as
// a relay hands the upstream's answer on.
func planeRefusal(t *testing.T, asJSON bool, status int, v wire.ValidationError) transport.Response {
	t.Helper()
	var body []byte
	var err error
	if asJSON {
		body, err = json.Marshal(v)
	} else {
		body, err = v.MarshalMsg(nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return transport.Response{Status: status, Body: body}
}

// The relay's answers: a non-200 is an error naming the status and the
// endpoint; a refusal body, the relay's own or the control plane's, is
// read (bounded) rather than quoted; a relay's own 400 says which relay
// refuses a download; a bare 400 from upstream is not taken for the
// relay's; a failed trip is wrapped, and a body over limit is refused.
func TestDownloadsGetThroughARelayErrors(t *testing.T) {
	d, err := NewDownloads("https://plane:8383", "")
	if err != nil {
		t.Fatal(err)
	}
	const u = "https://plane:8383/v1/blobs/ns/k?exp=1&size=0&sig=abc"
	const notForwarded = "status 400: relay_refused (endpoint /v1/blobs/ns/k is not allowed by this relay): a relay that does not forward downloads"
	long := strings.Repeat("x", 10*wire.MaxRefusalText)
	for _, tc := range []struct {
		name  string
		relay fakeRelay
		limit int64
		want  string
		not   string
	}{
		{"not found", fakeRelay{resp: transport.Response{Status: 404, Body: []byte("no such blob\n")}}, 100,
			"POST /v1/blobs/ns/k through the relay (download of https://plane:8383/v1/blobs/ns/k?…): status 404: no such blob", ""},
		{"text body", fakeRelay{resp: transport.Response{Status: 403, Body: []byte("URL expired")}}, 100, "status 403: URL expired", ""},
		{"relay's own, id reply", fakeRelay{resp: relayRefusal(t, false, 400, "endpoint /v1/blobs/ns/k is not allowed by this relay")}, 100, notForwarded, ""},
		{"relay's own, raw reply", fakeRelay{resp: relayRefusal(t, true, 400, "endpoint /v1/blobs/ns/k is not allowed by this relay")}, 100, notForwarded, ""},
		{"relay's own, oversize", fakeRelay{resp: relayRefusal(t, false, 413, "request of 300 MiB, over the frame ceiling")}, 100,
			"status 413: relay_refused (request of 300 MiB, over the frame ceiling)", "does not forward"},
		{"plane's own, msgpack", fakeRelay{resp: planeRefusal(t, false, 403, wire.ValidationError{Error: "forbidden", Message: "URL expired"})}, 100,
			"status 403: forbidden (URL expired)", "relay_refused"},
		{"plane's own, JSON", fakeRelay{resp: planeRefusal(t, true, 400, wire.ValidationError{Error: "bad_query", Message: "no sig"})}, 100,
			"status 400: bad_query (no sig)", "relay_refused"},
		{"plane's own, long", fakeRelay{resp: planeRefusal(t, false, 403, wire.ValidationError{Error: "forbidden", Message: long})}, 100,
			"status 403: forbidden (xxx", long[:wire.MaxRefusalText]},
		{"bare 400 from upstream", fakeRelay{resp: transport.Response{Status: 400, Body: []byte{}}}, 100, "status 400: ", "does not forward"},
		{"trip failed", fakeRelay{err: errors.New("no relay is reading")}, 100, "POST /v1/blobs/ns/k through the relay (download of https://plane:8383/v1/blobs/ns/k?…): no relay is reading", ""},
		{"over limit", fakeRelay{resp: transport.Response{Status: 200, Body: make([]byte, 101)}}, 100, "101 bytes, over the 100-byte limit", ""},
	} {
		relay := tc.relay
		_, _, err := d.Through(&relay).Get(context.Background(), u, nil, tc.limit)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %.400v, want %q", tc.name, err, tc.want)
			continue
		}
		if tc.not != "" && strings.Contains(err.Error(), tc.not) {
			t.Errorf("%s: err %.400v, want no %.40q", tc.name, err, tc.not)
		}
		if strings.Contains(err.Error(), "sig=") {
			t.Errorf("%s: the error shows the signature: %v", tc.name, err)
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
