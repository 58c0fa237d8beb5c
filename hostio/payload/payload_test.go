package payload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nymphd/nymph/hostio/blobcache"
	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/payload"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// plane answers presigns with a URL on a file server that serves body,
// counting both.
type plane struct {
	t        *testing.T
	files    *httptest.Server
	body     []byte
	presigns atomic.Int32
	gets     atomic.Int32
	// status, when set, is the presign's answer instead of a URL.
	status int
	method string
	auth   atomic.Value // the Authorization header the file server saw
}

func newPlane(t *testing.T, body []byte) *plane {
	p := &plane{t: t, body: body, method: http.MethodGet}
	p.files = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.gets.Add(1)
		p.auth.Store(r.Header.Get("Authorization"))
		if r.URL.Query().Get("sig") != "ok" || r.Header.Get("X-Blob") != "yes" {
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		w.Write(p.body)
	}))
	t.Cleanup(p.files.Close)
	return p
}

func (p *plane) CanWithdraw() bool { return true }

func (p *plane) RoundTrip(_ context.Context, req *transport.Request) (*transport.Response, error) {
	p.presigns.Add(1)
	var in wire.PresignRequest
	if _, err := in.UnmarshalMsg(req.Body); err != nil {
		p.t.Errorf("presign body: %v", err)
	}
	if req.Endpoint != wire.PathPresign("ns1") || in.Op != "get" || in.Key != "k/1" {
		p.t.Errorf("presign %s %+v", req.Endpoint, in)
	}
	if p.status != 0 {
		body, _ := (&wire.ValidationError{Error: "not_found", Message: "no blob"}).MarshalMsg(nil)
		return &transport.Response{Status: p.status, Body: body}, nil
	}
	out := wire.PresignResponse{URL: p.files.URL + "/blob?sig=ok", Method: p.method, Headers: map[string]string{"X-Blob": "yes"}}
	body, _ := out.MarshalMsg(nil)
	return &transport.Response{Status: 200, Body: body}, nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func resolver(t *testing.T, p *plane) (*payload.Resolver, *blobcache.Cache) {
	t.Helper()
	cache, err := blobcache.Open(filepath.Join(t.TempDir(), "cache"), 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := httpclient.NewDownloads("https://plane.invalid", "")
	if err != nil {
		t.Fatal(err)
	}
	return payload.New(payload.Options{Transport: p, Downloads: dl, Cache: cache}), cache
}

func ref(body []byte, sha string) wire.PayloadRef {
	r := wire.PayloadRef{Bucket: "ns1", Key: "k/1", Size: wire.Int(len(body))}
	if sha != "" {
		r.SHA256 = &sha
	}
	return r
}

func TestFetchDownloadsOnceAndVerifies(t *testing.T) {
	body := bytes.Repeat([]byte("payload "), 40000)
	p := newPlane(t, body)
	r, _ := resolver(t, p)
	for i, wantHit := range []bool{false, true} {
		path, hit, err := r.Fetch(context.Background(), ref(body, strings.ToUpper(digest(body))))
		if err != nil {
			t.Fatal(err)
		}
		if hit != wantHit {
			t.Fatalf("fetch %d: hit %v", i, hit)
		}
		got, _ := os.ReadFile(path)
		if !bytes.Equal(got, body) {
			t.Fatalf("fetch %d: %d bytes, not the payload", i, len(got))
		}
	}
	if p.presigns.Load() != 1 || p.gets.Load() != 1 {
		t.Fatalf("%d presigns, %d downloads: want one each", p.presigns.Load(), p.gets.Load())
	}
	if a := p.auth.Load(); a != "" {
		t.Fatalf("the download carried Authorization %q", a)
	}
}

func TestFetchRefusesADigestMismatch(t *testing.T) {
	body := []byte("what the store holds")
	p := newPlane(t, body)
	r, cache := resolver(t, p)
	_, _, err := r.Fetch(context.Background(), ref(body, digest([]byte("what the command was promised"))))
	if !errors.Is(err, payload.ErrDigestMismatch) {
		t.Fatalf("err %v: want a digest mismatch", err)
	}
	if cache.Bytes() != 0 {
		t.Fatalf("%d bytes kept after a mismatch", cache.Bytes())
	}
}

func TestFetchRefusesAWrongSize(t *testing.T) {
	body := []byte("eleven byte")
	p := newPlane(t, body)
	r, _ := resolver(t, p)
	rf := ref(body, "")
	rf.Size = 5
	if _, _, err := r.Fetch(context.Background(), rf); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("err %v: want the download refused past the ref's size", err)
	}
	rf.Size = 50
	if _, _, err := r.Fetch(context.Background(), rf); err == nil || !strings.Contains(err.Error(), "payload_ref says 50") {
		t.Fatalf("err %v: want a size mismatch", err)
	}
}

func TestFetchWithoutDigestDownloadsEachTime(t *testing.T) {
	body := []byte("no digest given")
	p := newPlane(t, body)
	r, _ := resolver(t, p)
	for range 2 {
		if _, hit, err := r.Fetch(context.Background(), ref(body, "")); err != nil || hit {
			t.Fatalf("hit %v err %v", hit, err)
		}
	}
	if p.gets.Load() != 2 {
		t.Fatalf("%d downloads: a ref without a digest is never trusted to the cache", p.gets.Load())
	}
}

func TestFetchRefusesBadRefsBeforeAnyRequest(t *testing.T) {
	p := newPlane(t, nil)
	r, _ := resolver(t, p)
	bad := "abc"
	for name, rf := range map[string]wire.PayloadRef{
		"short sha":   {Bucket: "ns1", Key: "k/1", SHA256: &bad},
		"no key":      {Bucket: "ns1"},
		"no bucket":   {Key: "k/1"},
		"over 100MiB": {Bucket: "ns1", Key: "k/1", Size: wire.PayloadMax + 1},
	} {
		if _, _, err := r.Fetch(context.Background(), rf); !errors.Is(err, wire.ErrPayloadInvalid) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if p.presigns.Load() != 0 {
		t.Fatalf("%d presigns for refs refused on sight", p.presigns.Load())
	}
}

func TestFetchReportsThePlanesRefusal(t *testing.T) {
	p := newPlane(t, nil)
	p.status = http.StatusNotFound
	r, _ := resolver(t, p)
	_, _, err := r.Fetch(context.Background(), ref([]byte("x"), ""))
	if err == nil || !strings.Contains(err.Error(), "status 404: not_found no blob") {
		t.Fatalf("err %v", err)
	}
	p.status = 0
	p.method = http.MethodPut
	if _, _, err := r.Fetch(context.Background(), ref([]byte("x"), "")); err == nil || !strings.Contains(err.Error(), `method "PUT"`) {
		t.Fatalf("err %v", err)
	}
}

func TestStage(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".payloads")
	src := filepath.Join(t.TempDir(), "entry")
	if err := os.WriteFile(src, []byte("cached"), 0o444); err != nil {
		t.Fatal(err)
	}
	file, remove, err := payload.Stage(root, "exec-1", nil, src)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(file); string(got) != "cached" {
		t.Fatalf("staged %q", got)
	}
	remove()
	if _, err := os.Stat(filepath.Dir(file)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging dir left: %v", err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("removing the stage removed the cache entry: %v", err)
	}
	file, remove, err = payload.Stage(root, "exec-2", []byte("inline"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("inline payload mode %v err %v", fi.Mode(), err)
	}
	if _, _, err := payload.Stage(root, "../escape", []byte("x"), ""); err == nil {
		t.Fatal("an exec id with a path in it was staged")
	}
}

// relayPlane is a control plane behind a relay, as the daemon's relayed
// transport reaches it: presigns and downloads both arrive as POSTs of an
// endpoint path.
type relayPlane struct {
	t       *testing.T
	body    []byte
	url     string // what presign answers
	status  int    // the download's answer, 200 when 0
	posts   []*transport.Request
	refused bool // answer as a relay that does not know the download routes
	// refusal, when set, is the control plane's own refusal of the
	// download, encoded as JSON when asJSON.
	refusal *wire.ValidationError
	asJSON  bool
}

func (p *relayPlane) CanWithdraw() bool { return false }

func (p *relayPlane) RoundTrip(_ context.Context, req *transport.Request) (*transport.Response, error) {
	p.posts = append(p.posts, req)
	if req.Endpoint == wire.PathPresign("ns1") {
		out := wire.PresignResponse{URL: p.url, Method: http.MethodGet, Headers: map[string]string{}}
		body, _ := out.MarshalMsg(nil)
		return &transport.Response{Status: 200, Body: body}, nil
	}
	switch {
	case p.refused:
		// What a relayed transport hands on: frame's parse of the relay's
		// id reply carrying a relay_error and no upstream body.
		reply, _ := (&wire.RelayReply{ID: "01J.2", Status: http.StatusBadRequest,
			RelayError: &wire.RelayReplyError{Message: "endpoint " + req.Endpoint + " is not allowed by this relay"}}).MarshalMsg(nil)
		r, mine, err := frame.ParseReply(reply, "01J.2")
		if err != nil || !mine {
			p.t.Fatalf("relay reply: mine %v, err %v", mine, err)
		}
		return &transport.Response{Status: r.Status, Body: r.Body}, nil
	case p.refusal != nil:
		body, err := p.refusal.MarshalMsg(nil)
		if p.asJSON {
			body, err = json.Marshal(p.refusal)
		}
		if err != nil {
			p.t.Fatal(err)
		}
		return &transport.Response{Status: http.StatusForbidden, Body: body}, nil
	case p.status != 0:
		return &transport.Response{Status: p.status, Body: []byte("no such blob\n")}, nil
	case len(req.Body) != 0 || req.Headers[wire.HeaderDownloadQuery] != "exp=9&size=0&sig=ok":
		return &transport.Response{Status: http.StatusForbidden, Body: []byte("bad signature")}, nil
	}
	return &transport.Response{Status: 200, Body: p.body}, nil
}

func relayedResolver(t *testing.T, p *relayPlane) *payload.Resolver {
	t.Helper()
	cache, err := blobcache.Open(filepath.Join(t.TempDir(), "cache"), 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := httpclient.NewDownloads("https://plane.invalid:8383/", "")
	if err != nil {
		t.Fatal(err)
	}
	return payload.New(payload.Options{Transport: p, Downloads: dl.Through(p), Cache: cache})
}

// Behind a relay the download goes through it: a POST of the URL's path,
// its query in X-LS-Download-Query, no connection of its own.
func TestFetchThroughARelay(t *testing.T) {
	body := bytes.Repeat([]byte("relayed "), 50000)
	p := &relayPlane{t: t, body: body, url: "https://plane.invalid:8383/v1/blobs/ns1/k/1?exp=9&size=0&sig=ok"}
	r := relayedResolver(t, p)
	path, _, err := r.Fetch(context.Background(), ref(body, digest(body)))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Fatalf("%d bytes, not the payload", len(got))
	}
	if len(p.posts) != 2 || p.posts[1].Endpoint != "/v1/blobs/ns1/k/1" {
		t.Fatalf("posts %+v: want the presign, then the blob's path", p.posts)
	}
}

func TestFetchThroughARelayReportsRefusals(t *testing.T) {
	body := []byte("x")
	for name, tc := range map[string]struct {
		p    relayPlane
		want string
	}{
		"not found": {relayPlane{status: 404, url: "https://plane.invalid:8383/v1/blobs/ns1/k/1?exp=9&size=0&sig=ok"},
			"POST /v1/blobs/ns1/k/1 through the relay (download of https://plane.invalid:8383/v1/blobs/ns1/k/1?…): status 404: no such blob"},
		"forbidden": {relayPlane{url: "https://plane.invalid:8383/v1/blobs/ns1/k/1?exp=1&size=0&sig=bad"},
			"status 403: bad signature"},
		"old relay": {relayPlane{refused: true, url: "https://plane.invalid:8383/v1/blobs/ns1/k/1?exp=9&size=0&sig=ok"},
			"status 400: relay_refused (endpoint /v1/blobs/ns1/k/1 is not allowed by this relay): a relay that does not forward downloads"},
		"plane's refusal, msgpack": {relayPlane{refusal: &wire.ValidationError{Error: "expired", Message: "URL expired 5s ago"},
			url: "https://plane.invalid:8383/v1/blobs/ns1/k/1?exp=9&size=0&sig=ok"},
			"status 403: expired (URL expired 5s ago)"},
		"plane's refusal, JSON": {relayPlane{refusal: &wire.ValidationError{Error: "expired", Message: "URL expired 5s ago"}, asJSON: true,
			url: "https://plane.invalid:8383/v1/blobs/ns1/k/1?exp=9&size=0&sig=ok"},
			"status 403: expired (URL expired 5s ago)"},
		"other origin": {relayPlane{url: "https://bucket.example/ns1/k/1?sig=ok"},
			"not on the control plane's origin https://plane.invalid:8383"},
		"other port": {relayPlane{url: "https://plane.invalid/v1/blobs/ns1/k/1?sig=ok"},
			"not on the control plane's origin"},
	} {
		p := tc.p
		p.t = t
		_, _, err := relayedResolver(t, &p).Fetch(context.Background(), ref(body, ""))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
		if strings.Contains(fmt.Sprint(err), "sig=") {
			t.Errorf("%s: the error shows the URL's signature: %v", name, err)
		}
		if strings.HasPrefix(name, "other") && len(p.posts) != 1 {
			t.Errorf("%s: %d posts: a URL a relay cannot reach is never sent", name, len(p.posts))
		}
	}
}

// Through a relay the body arrives whole; one over the ref's size is
// refused all the same.
func TestFetchThroughARelayBoundsTheBody(t *testing.T) {
	body := []byte("eleven byte")
	p := &relayPlane{t: t, body: body, url: "https://plane.invalid:8383/v1/blobs/ns1/k/1?exp=9&size=0&sig=ok"}
	rf := ref(body, "")
	rf.Size = 5
	if _, _, err := relayedResolver(t, p).Fetch(context.Background(), rf); err == nil || !strings.Contains(err.Error(), "11 bytes, over the 5-byte limit") {
		t.Fatalf("err %v", err)
	}
}
