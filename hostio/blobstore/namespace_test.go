package blobstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

func TestAKeyLivesInItsNamespace(t *testing.T) {
	f := newFixture(t)
	f.store(t, "job1/args.msgpack", "first job's args")
	// The same key in another namespace is another blob: absent for a get,
	// free for a put.
	_, err := f.s.Presign(planeserver.Presign{Namespace: "ns2", Op: "get", Key: "job1/args.msgpack"}, t0)
	if !errors.Is(err, planeserver.ErrPresignNotFound) || !strings.Contains(err.Error(), `no blob "job1/args.msgpack" in namespace "ns2"`) {
		t.Fatalf("get from another namespace: %v, want not found", err)
	}
	put, err := f.s.Presign(planeserver.Presign{Namespace: "ns2", Op: "put", Key: "job1/args.msgpack"}, t0)
	if err != nil {
		t.Fatalf("put of the same key in another namespace: %v", err)
	}
	if st, body := do(t, put.Method, put.URL, []byte("second job's args")); st != 200 {
		t.Fatalf("PUT = %d %s", st, body)
	}
	for ns, want := range map[string]string{testNS: "first job's args", "ns2": "second job's args"} {
		get, err := f.s.Presign(planeserver.Presign{Namespace: ns, Op: "get", Key: "job1/args.msgpack"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if st, body := do(t, get.Method, get.URL, nil); st != 200 || string(body) != want {
			t.Errorf("GET in %s = %d %q, want %q", ns, st, body, want)
		}
	}
}

func TestAPutNeverReplacesABlobUnlessAsked(t *testing.T) {
	f := newFixture(t)
	f.store(t, "job1/args.msgpack", "first")
	_, err := f.presign("put", "job1/args.msgpack", 0)
	if !errors.Is(err, planeserver.ErrPresignConflict) || !strings.Contains(err.Error(), `key "job1/args.msgpack" exists in namespace "ns1"; send overwrite: true to replace it`) {
		t.Fatalf("put over an existing key: %v, want a conflict that names the way out", err)
	}
	// The other side: asked explicitly, the put replaces it.
	put, err := f.s.Presign(planeserver.Presign{Namespace: testNS, Op: "put", Key: "job1/args.msgpack", Overwrite: true}, t0)
	if err != nil {
		t.Fatalf("put with overwrite: %v", err)
	}
	if st, body := do(t, put.Method, put.URL, []byte("second")); st != 200 {
		t.Fatalf("PUT with overwrite = %d %s", st, body)
	}
	get := f.mustPresign(t, "get", "job1/args.msgpack", 0)
	if st, body := do(t, get.Method, get.URL, nil); st != 200 || string(body) != "second" {
		t.Fatalf("GET after overwrite = %d %q", st, body)
	}
	// Overwrite means nothing for a get, and a key that is absent needs none.
	if _, err := f.s.Presign(planeserver.Presign{Namespace: testNS, Op: "get", Key: "absent", Overwrite: true}, t0); !errors.Is(err, planeserver.ErrPresignNotFound) {
		t.Errorf("get with overwrite of an absent key: %v", err)
	}
	f.mustPresign(t, "put", "absent", 0)
}

func TestTwoPutsPresignedTogetherOnlyTheFirstLands(t *testing.T) {
	f := newFixture(t)
	a := f.mustPresign(t, "put", "race", 0)
	b := f.mustPresign(t, "put", "race", 0)
	if st, _ := do(t, a.Method, a.URL, []byte("a")); st != 200 {
		t.Fatalf("first PUT = %d", st)
	}
	if st, body := do(t, b.Method, b.URL, []byte("b")); st != 409 || !strings.Contains(string(body), "overwrite: true") {
		t.Fatalf("second PUT = %d %s, want 409", st, body)
	}
	if data, _ := os.ReadFile(filepath.Join(f.dir, DirName, testNS, "race")); string(data) != "a" {
		t.Fatalf("blob = %q, want the first put's", data)
	}
	if left, _ := os.ReadDir(filepath.Join(f.dir, DirName, incomingDir)); len(left) != 0 {
		t.Errorf("uploads left behind: %v", left)
	}
}

func TestKeysThatWouldCrossABlobAreRefused(t *testing.T) {
	f := newFixture(t)
	f.store(t, "a", "blob a")
	f.store(t, "x/y", "blob x/y")
	for _, p := range []planeserver.Presign{
		{Namespace: testNS, Op: "put", Key: "a/b"},                    // under a blob
		{Namespace: testNS, Op: "put", Key: "x"},                      // over a directory of keys
		{Namespace: testNS, Op: "put", Key: "x", Overwrite: true},     // even when asked
		{Namespace: testNS, Op: "put", Key: "a/b/c", Overwrite: true}, // further under a blob
	} {
		if _, err := f.s.Presign(p, t0); !errors.Is(err, planeserver.ErrPresignConflict) {
			t.Errorf("put %q (overwrite %v): %v, want a conflict", p.Key, p.Overwrite, err)
		}
	}
	if _, err := f.presign("get", "x", 0); !errors.Is(err, planeserver.ErrPresignNotFound) {
		t.Errorf("get of a directory of keys: %v, want not found", err)
	}
}

// planeFixture is serve's routing in front of a real Store: presign goes
// through the daemon route, blobs through the presigned URLs.
type planeFixture struct {
	srv   *httptest.Server
	blobs *Store
}

const planeDaemonToken = "daemon-secret"

func newPlaneFixture(t *testing.T) *planeFixture { return newPlaneFixtureWith(t, nil) }

// newPlaneFixtureWith is newPlaneFixture with serve's config adjusted by
// tweak.
func newPlaneFixtureWith(t *testing.T, tweak func(*planeserver.Config)) *planeFixture {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	base := "http://" + hs.Listener.Addr().String()
	blobs, err := Open(t.TempDir(), base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	cfg := planeserver.Config{
		Store: planeserver.NewMemStore(), Blobs: blobs, DaemonToken: planeDaemonToken, AdminToken: "admin-secret",
		PublicURL: base, Plane: plane.Config{Entropy: rand.Reader},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := planeserver.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The loop answers every daemon route, presign included: it is the
	// plane core that checks a request's credentials.
	ctx, cancel := context.WithCancel(context.Background())
	loopDone := make(chan error, 1)
	go func() { loopDone <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-loopDone })
	hs.Config.Handler = srv.Handler()
	hs.Start()
	t.Cleanup(hs.Close)
	return &planeFixture{srv: hs, blobs: blobs}
}

// presign posts a presign body to ns's route and returns the status and
// the decoded reply (the URL on success, the error otherwise).
func (p *planeFixture) presign(t *testing.T, ns, ctype string, body []byte) (int, wire.PresignResponse, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", p.srv.URL+"/v1/namespaces/"+ns+"/payloads/presign", bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "Bearer "+planeDaemonToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out wire.PresignResponse
	var failure struct {
		Error string `json:"error" msg:"error"`
	}
	if ctype == wire.ContentTypeJSON {
		if resp.StatusCode == 200 {
			json.Unmarshal(data, &out)
		} else {
			json.Unmarshal(data, &failure)
		}
	} else if resp.StatusCode == 200 {
		if _, err := out.UnmarshalMsg(data); err != nil {
			t.Fatalf("reply: %v", err)
		}
	} else {
		failure.Error = decodeErrorBody(t, data)
	}
	return resp.StatusCode, out, failure.Error
}

func decodeErrorBody(t *testing.T, b []byte) string {
	t.Helper()
	n, rest, err := msgp.ReadMapHeaderBytes(b)
	for ; err == nil && n > 0; n-- {
		var k []byte
		if k, rest, err = msgp.ReadMapKeyZC(rest); err != nil {
			break
		}
		if string(k) == "error" {
			s, _, err := msgp.ReadStringBytes(rest)
			if err == nil {
				return s
			}
		}
		rest, err = msgp.Skip(rest)
	}
	t.Fatalf("no error in %q: %v", b, err)
	return ""
}

// presignBody is a msgpack presign request; overwrite is added when not nil.
func presignBody(op, key string, overwrite any) []byte {
	b := msgp.AppendMapHeader(nil, 2+map[bool]uint32{true: 1}[overwrite != nil])
	b = msgp.AppendString(msgp.AppendString(b, "op"), op)
	b = msgp.AppendString(msgp.AppendString(b, "key"), key)
	if overwrite != nil {
		b, _ = msgp.AppendIntf(msgp.AppendString(b, "overwrite"), overwrite)
	}
	return b
}

func TestServePresignIsScopedAndRefusesOverwrites(t *testing.T) {
	p := newPlaneFixture(t)
	put := func(ns, key, data string, overwrite any) (int, string) {
		t.Helper()
		st, resp, msg := p.presign(t, ns, wire.ContentTypeMsgpack, presignBody("put", key, overwrite))
		if st != 200 {
			return st, msg
		}
		if st, body := do(t, resp.Method, resp.URL, []byte(data)); st != 200 {
			t.Fatalf("PUT = %d %s", st, body)
		}
		return 200, ""
	}
	if st, msg := put("team-a", "job-1/args", "a's args", nil); st != 200 {
		t.Fatalf("first put: %d %s", st, msg)
	}
	// A second put of the key: refused, and said why; nothing overwritten.
	st, msg := put("team-a", "job-1/args", "another job's args", nil)
	if st != 409 || !strings.Contains(msg, "send overwrite: true to replace it") {
		t.Fatalf("second put: %d %q, want 409 naming overwrite", st, msg)
	}
	if st, msg := put("team-a", "job-1/args", "same", false); st != 409 {
		t.Fatalf("put with overwrite: false = %d %q, want 409", st, msg)
	}
	// The other namespace neither sees it nor collides with it.
	if st, _, msg := p.presign(t, "team-b", wire.ContentTypeMsgpack, presignBody("get", "job-1/args", nil)); st != 404 || !strings.Contains(msg, `no blob "job-1/args" in namespace "team-b"`) {
		t.Fatalf("get from team-b: %d %q, want 404", st, msg)
	}
	if st, msg := put("team-b", "job-1/args", "b's args", nil); st != 200 {
		t.Fatalf("put in team-b: %d %s", st, msg)
	}
	get := func(ns string, ctype string, body []byte) string {
		t.Helper()
		st, resp, msg := p.presign(t, ns, ctype, body)
		if st != 200 {
			t.Fatalf("presign get in %s: %d %s", ns, st, msg)
		}
		_, data := do(t, resp.Method, resp.URL, nil)
		return string(data)
	}
	if got := get("team-a", wire.ContentTypeMsgpack, presignBody("get", "job-1/args", nil)); got != "a's args" {
		t.Fatalf("team-a's blob = %q", got)
	}
	// Asked explicitly (msgpack true), the put replaces it.
	if st, msg := put("team-a", "job-1/args", "a's new args", true); st != 200 {
		t.Fatalf("put with overwrite: true = %d %s", st, msg)
	}
	if got := get("team-a", wire.ContentTypeJSON, []byte(`{"op":"get","key":"job-1/args"}`)); got != "a's new args" {
		t.Fatalf("after overwrite = %q", got)
	}
	if got := get("team-b", wire.ContentTypeMsgpack, presignBody("get", "job-1/args", nil)); got != "b's args" {
		t.Fatalf("team-b's blob = %q", got)
	}
	// JSON says it the same way.
	if st, _, msg := p.presign(t, "team-a", wire.ContentTypeJSON, []byte(`{"op":"put","key":"job-1/args"}`)); st != 409 {
		t.Fatalf("JSON put without overwrite: %d %s", st, msg)
	}
	if st, _, msg := p.presign(t, "team-a", wire.ContentTypeJSON, []byte(`{"op":"put","key":"job-1/args","overwrite":true}`)); st != 200 {
		t.Fatalf("JSON put with overwrite: %d %s", st, msg)
	}
	// A namespace the route carries escaped, or an overwrite that is not a
	// bool: 400, named.
	for _, tc := range []struct {
		ns, ctype string
		body      []byte
		want      string
	}{
		{"a%20b", wire.ContentTypeMsgpack, presignBody("put", "k", nil), `namespace "a b"`},
		{".hidden", wire.ContentTypeMsgpack, presignBody("put", "k", nil), `namespace ".hidden"`},
		{strings.Repeat("n", MaxNamespaceLen+1), wire.ContentTypeMsgpack, presignBody("put", "k", nil), "at most 128 bytes"},
		{"team-a", wire.ContentTypeMsgpack, presignBody("put", "k", 1), "overwrite"},
		{"team-a", wire.ContentTypeMsgpack, presignBody("put", "k", "yes"), "overwrite"},
		{"team-a", wire.ContentTypeJSON, []byte(`{"op":"put","key":"k","overwrite":"yes"}`), "overwrite"},
	} {
		st, _, msg := p.presign(t, tc.ns, tc.ctype, tc.body)
		// Decode errors name the field as the decoder spells it (Overwrite).
		if st != 400 || !strings.Contains(strings.ToLower(msg), strings.ToLower(tc.want)) {
			t.Errorf("presign in %q of %q: %d %q, want 400 naming %s", tc.ns, tc.body, st, msg, tc.want)
		}
	}
	// nil is no overwrite, as absent is.
	if st, msg := put("team-a", "job-1/args", "x", msgp.Raw{0xc0}); st != 409 {
		t.Errorf("overwrite: nil = %d %q, want 409", st, msg)
	}
}
