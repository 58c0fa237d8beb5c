package blobstore

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/wirecore/wire"
)

var t0 = time.Unix(1_800_000_000, 0)

// fixture is a Store mounted on a test server whose clock the test sets.
type fixture struct {
	s   *Store
	srv *httptest.Server
	now time.Time
	dir string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{now: t0, dir: t.TempDir()}
	mux := http.NewServeMux()
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	s, err := Open(f.dir, f.srv.URL, Options{TTL: time.Minute, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f.s = s
	mux.Handle(planeserver.BlobPathPrefix, s.Handler())
	return f
}

var _ planeserver.BlobStore = (*Store)(nil)

// testNS is the namespace the tests presign in unless they say otherwise.
const testNS = "ns1"

// presign asks the store for a URL in testNS.
func (f *fixture) presign(op, key string, size int64) (wire.PresignResponse, error) {
	return f.s.Presign(planeserver.Presign{Namespace: testNS, Op: op, Key: key, Size: size}, t0)
}

// mustPresign is presign for a request that must succeed.
func (f *fixture) mustPresign(t *testing.T, op, key string, size int64) wire.PresignResponse {
	t.Helper()
	r, err := f.presign(op, key, size)
	if err != nil {
		t.Fatalf("presign %s %s: %v", op, key, err)
	}
	return r
}

// store puts data under key in testNS through a presigned URL.
func (f *fixture) store(t *testing.T, key, data string) {
	t.Helper()
	put := f.mustPresign(t, "put", key, 0)
	if st, body := do(t, put.Method, put.URL, []byte(data)); st != 200 {
		t.Fatalf("PUT %s = %d %s", key, st, body)
	}
}

func do(t *testing.T, method, u string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestPutThenGet(t *testing.T) {
	f := newFixture(t)
	put := f.mustPresign(t, "put", "job1/args.msgpack", 5)
	if put.Method != http.MethodPut || int64(put.ExpiresAt) != t0.Add(time.Minute).Unix() {
		t.Fatalf("put presign = %+v", put)
	}
	if !strings.HasPrefix(put.URL, f.srv.URL+planeserver.BlobPathPrefix+testNS+"/job1/args.msgpack?") {
		t.Fatalf("put URL %s not under this server's blob prefix", put.URL)
	}
	if st, body := do(t, put.Method, put.URL, []byte("hello")); st != 200 {
		t.Fatalf("PUT = %d %s", st, body)
	}
	get := f.mustPresign(t, "get", "job1/args.msgpack", 0)
	st, body := do(t, get.Method, get.URL, nil)
	if st != 200 || string(body) != "hello" {
		t.Fatalf("GET = %d %q", st, body)
	}
	if data, err := os.ReadFile(filepath.Join(f.dir, DirName, testNS, "job1", "args.msgpack")); err != nil || string(data) != "hello" {
		t.Fatalf("file on disk = %q, %v", data, err)
	}
}

func TestPutWithoutKeyGetsFreshKey(t *testing.T) {
	f := newFixture(t)
	fresh := planeserver.Presign{Namespace: testNS, Op: "put", JobID: "job-7", Kind: "result"}
	a, err := f.s.Presign(fresh, t0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.s.Presign(fresh, t0)
	if a.URL == b.URL {
		t.Fatal("two keyless puts got the same URL")
	}
	if !strings.Contains(a.URL, "/"+testNS+"/job-7/result/") {
		t.Fatalf("fresh key does not carry job and kind: %s", a.URL)
	}
	if st, _ := do(t, "PUT", a.URL, []byte("any size")); st != 200 {
		t.Fatalf("PUT without size = %d", st)
	}
}

func TestRefusals(t *testing.T) {
	f := newFixture(t)
	f.store(t, "seed", "xyz")
	get := f.mustPresign(t, "get", "seed", 0)
	put := f.mustPresign(t, "put", "k", 3)
	tamper := func(u, k, v string) string {
		pu, _ := url.Parse(u)
		q := pu.Query()
		q.Set(k, v)
		pu.RawQuery = q.Encode()
		return pu.String()
	}
	flip := func(sig string) string {
		b := []byte(sig)
		if b[0] == 'a' {
			b[0] = 'b'
		} else {
			b[0] = 'a'
		}
		return string(b)
	}
	sig := func(u string) string { pu, _ := url.Parse(u); return pu.Query().Get("sig") }
	base := f.srv.URL + planeserver.BlobPathPrefix
	for _, tc := range []struct {
		name, method, url string
		body              []byte
		want              int
	}{
		{"get URL used to put", "PUT", get.URL, []byte("abc"), 403},
		{"put URL used to get", "GET", put.URL, nil, 403},
		{"bad signature", "GET", tamper(get.URL, "sig", flip(sig(get.URL))), nil, 403},
		{"raised size", "PUT", tamper(put.URL, "size", "100"), []byte("abc"), 403},
		{"overwrite added", "PUT", tamper(put.URL, "overwrite", "1"), []byte("abc"), 403},
		{"later expiry", "GET", tamper(get.URL, "exp", "9999999999"), nil, 403},
		{"no signature", "GET", base + testNS + "/seed", nil, 403},
		{"other key", "GET", strings.Replace(get.URL, "/seed?", "/j?", 1), nil, 403},
		{"other namespace", "GET", strings.Replace(get.URL, "/"+testNS+"/", "/ns2/", 1), nil, 403},
		{"escaped slash", "GET", strings.Replace(get.URL, "/seed?", "/a%2Fk?", 1), nil, 400},
		{"hidden segment", "GET", strings.Replace(get.URL, "/"+testNS+"/seed?", "/.incoming/x?", 1), nil, 400},
		{"wrong method", "DELETE", get.URL, nil, 405},
		{"oversized body", "PUT", put.URL, []byte("abcdef"), 413},
		{"short body", "PUT", put.URL, []byte("ab"), 400},
	} {
		st, body := do(t, tc.method, tc.url, tc.body)
		if st != tc.want {
			t.Errorf("%s: %s %s = %d %s, want %d", tc.name, tc.method, tc.url, st, body, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(f.dir, DirName, testNS, "k")); !os.IsNotExist(err) {
		t.Errorf("a refused PUT left a blob: %v", err)
	}
	// Paths a client would clean before sending reach the handler as-is;
	// a path without a namespace is no blob path either.
	for _, p := range []string{"/v1/blobs/a/../k", "/v1/blobs/./k", "/v1/blobs//k", "/v1/k", "/v1/blobs/seed", "/v1/blobs/" + testNS + "/"} {
		rec := httptest.NewRecorder()
		f.s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", p+"?"+strings.SplitN(get.URL, "?", 2)[1], nil))
		if rec.Code != 400 {
			t.Errorf("GET %s = %d, want 400", p, rec.Code)
		}
	}
	if st, _ := do(t, "PUT", put.URL, []byte("abc")); st != 200 {
		t.Fatalf("exact-size PUT = %d", st)
	}
	// The URL was presigned without overwrite: used again, it replaces nothing.
	if st, body := do(t, "PUT", put.URL, []byte("xyz")); st != 409 || !strings.Contains(string(body), "overwrite: true") {
		t.Errorf("second PUT of one URL = %d %s, want 409", st, body)
	}
	if data, _ := os.ReadFile(filepath.Join(f.dir, DirName, testNS, "k")); string(data) != "abc" {
		t.Errorf("blob after the refused PUT = %q, want the first one's", data)
	}
	os.Remove(filepath.Join(f.dir, DirName, testNS, "seed"))
	if st, _ := do(t, "GET", get.URL, nil); st != 404 {
		t.Errorf("GET of a blob removed since presign = %d, want 404", st)
	}
	f.now = t0.Add(time.Minute)
	if st, body := do(t, "GET", get.URL, nil); st != 403 || !strings.Contains(string(body), "expired") {
		t.Fatalf("expired GET = %d %s", st, body)
	}
}

func TestPresignRefusesBadRequests(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		ns, op, key string
		size        int64
	}{
		{testNS, "delete", "k", 0},
		{testNS, "get", "", 0},
		{testNS, "get", "../etc/passwd", 0},
		{testNS, "get", "/abs", 0},
		{testNS, "get", "a//b", 0},
		{testNS, "get", "a b", 0},
		{testNS, "get", strings.Repeat("a", MaxKeyLen+1), 0},
		{testNS, "put", strings.Repeat("a", MaxKeyLen+1), 0},
		{testNS, "put", "k", wire.PayloadMax + 1},
		{testNS, "put", "k", -1},
		{"", "put", "k", 0},
		{"..", "put", "k", 0},
		{".hidden", "put", "k", 0},
		{"a/b", "put", "k", 0},
		{"a b", "put", "k", 0},
		{strings.Repeat("n", MaxNamespaceLen+1), "put", "k", 0},
	} {
		_, err := f.s.Presign(planeserver.Presign{Namespace: tc.ns, Op: tc.op, Key: tc.key, Size: tc.size}, t0)
		if !errors.Is(err, planeserver.ErrPresignInvalid) {
			t.Errorf("Presign(%q, %q, %q, %d) = %v, want ErrPresignInvalid", tc.ns, tc.op, tc.key, tc.size, err)
		}
	}
	// The other side of each length limit.
	for _, p := range []planeserver.Presign{
		{Namespace: strings.Repeat("n", MaxNamespaceLen), Op: "put", Key: "k"},
		{Namespace: testNS, Op: "put", Key: strings.Repeat("a", MaxKeyLen)},
		{Namespace: testNS, Op: "put", Key: "k", Size: wire.PayloadMax},
	} {
		if _, err := f.s.Presign(p, t0); err != nil {
			t.Errorf("Presign(ns of %d bytes, key of %d bytes, size %d) = %v, want a URL", len(p.Namespace), len(p.Key), p.Size, err)
		}
	}
}

func TestMaxEnforcedWithoutSize(t *testing.T) {
	f := newFixture(t)
	if f.s.max != wire.PayloadMax {
		t.Fatalf("default max %d, want wire.PayloadMax", f.s.max)
	}
	// The same limit, made small so the test sends little.
	f.s.max = 1 << 20
	if _, err := f.presign("put", "k", f.s.max+1); !errors.Is(err, planeserver.ErrPresignInvalid) {
		t.Fatalf("presign over the max: %v", err)
	}
	put := f.mustPresign(t, "put", "big", 0)
	req, _ := http.NewRequest("PUT", put.URL, io.LimitReader(zeros{}, f.s.max+1))
	req.ContentLength = -1 // chunked: the limit must hold without a length
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("PUT of max+1 = %d, want 413", resp.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(f.dir, DirName, testNS, "big")); !os.IsNotExist(err) {
		t.Fatalf("oversized blob stored: %v", err)
	}
	put = f.mustPresign(t, "put", "fits", 0)
	req, _ = http.NewRequest("PUT", put.URL, io.LimitReader(zeros{}, f.s.max))
	req.ContentLength = -1
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT of exactly max = %d, want 200", resp.StatusCode)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestSecretCreatedPrivateAndReused(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, "http://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := a.Presign(planeserver.Presign{Namespace: testNS, Op: "put", Key: "k"}, t0)
	a.Close()
	fi, err := os.Stat(filepath.Join(dir, SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret mode %v, want 0600", fi.Mode().Perm())
	}
	b, err := Open(dir, "http://127.0.0.1:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pb, _ := b.Presign(planeserver.Presign{Namespace: testNS, Op: "put", Key: "k"}, t0)
	if pa.URL == "" || pa.URL != pb.URL {
		t.Fatal("a reopened store signs differently: URLs would not survive a restart")
	}
	secret := filepath.Join(dir, SecretFile)
	os.Chmod(secret, 0o644)
	_, err = Open(dir, "http://127.0.0.1:1", Options{})
	if want := "signing key " + secret + " has group or world access (mode 0644); chmod 600 " + secret; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a world-readable secret: %v, want %q", err, want)
	}
}
