package planeserver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// testCA is the CA fingerprint the trust tests' servers pin in their
// tokens.
var testCA = strings.Repeat("c4", 32)

// host is a daemon with its own key, signing as a daemon does.
type host struct {
	ts      *testServer
	machine string
	key     ed25519.PrivateKey
	nonce   atomic.Int64
}

func newHost(ts *testServer, machine string) *host {
	seed := sha256.Sum256([]byte("trust test host " + machine))
	return &host{ts: ts, machine: machine, key: ed25519.NewKeyFromSeed(seed[:])}
}

func (h *host) keyID() string { return identity.KeyID(h.key.Public().(ed25519.PublicKey)) }

// request is a daemon request on path with body, signed by h's key for
// the server's audience (nil key: unsigned), without a bearer.
func (h *host) request(path string, body []byte, key ed25519.PrivateKey) *http.Request {
	req, err := http.NewRequest("POST", h.ts.http.URL+path, bytes.NewReader(body))
	if err != nil {
		h.ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", wire.ContentTypeMsgpack)
	if key == nil {
		return req
	}
	s := &identity.Signature{KeyID: identity.KeyID(key.Public().(ed25519.PublicKey)), Timestamp: time.Now().Unix(),
		Nonce: fmt.Sprintf("trust-nonce-%08d", h.nonce.Add(1)), Audience: h.ts.http.URL}
	identity.Sign(key, identity.NewRequest("POST", req.URL.Path, body), s)
	for k, v := range s.Header() {
		req.Header.Set(k, v)
	}
	return req
}

func (h *host) helloBody(withKey bool) []byte {
	body := helloBody(h.machine)
	if withKey {
		pub := identity.EncodePublicKey(h.key.Public().(ed25519.PublicKey))
		body.PublicKey = &pub
	}
	b, err := body.MarshalMsg(nil)
	if err != nil {
		h.ts.t.Fatal(err)
	}
	return b
}

// join mints a token and enrols h with it, returning the worker id.
func (h *host) join() string {
	h.ts.t.Helper()
	req := h.request(wire.PathHello, h.helloBody(true), h.key)
	req.Header.Set(identity.HeaderEnrollToken, mintToken(h.ts, operator.TokenRequest{}).Secret)
	status, b := h.ts.do(req)
	var resp wire.HelloResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || status != 200 || resp.Reject != nil || resp.KeyID == nil || *resp.KeyID != h.keyID() {
		h.ts.t.Fatalf("join %s: %d %+v %v", h.machine, status, resp.Reject, err)
	}
	return *resp.WorkerID
}

func mintToken(ts *testServer, in operator.TokenRequest) identity.JoinToken {
	ts.t.Helper()
	var out operator.TokenCreated
	if st := ts.admin("POST", operator.PathTokens, in, &out); st != 200 {
		ts.t.Fatalf("mint: %d", st)
	}
	tok, err := identity.ParseJoinToken(out.Token)
	if err != nil || tok.Fingerprint != testCA {
		ts.t.Fatalf("minted %q: %v", out.Token, err)
	}
	if want := "nymph daemon join --server " + ts.srv.cfg.PublicURL + " --token " + out.Token; out.JoinCommand != want {
		ts.t.Fatalf("join command %q, want %q", out.JoinCommand, want)
	}
	return tok
}

func errorOf(t *testing.T, b []byte) plane.ErrorBody {
	t.Helper()
	var e plane.ErrorBody
	m, _, err := msgp.ReadMapStrIntfBytes(b, nil)
	if err != nil {
		t.Fatalf("error body %x: %v", b, err)
	}
	e.Error, _ = m["error"].(string)
	e.Message, _ = m["message"].(string)
	return e
}

func trustServer(t *testing.T, log *testkit.SyncBuffer, tweaks ...func(*Config)) *testServer {
	return newTestServer(t, nil, func(c *Config) {
		for _, f := range tweaks {
			f(c)
		}
		c.CAFingerprint = testCA
		if log != nil {
			c.Log = slog.New(slog.NewTextHandler(log, nil))
		}
	})
}

// A host joins over HTTP with its token and signs every request after:
// no bearer is needed, and the bearer alone no longer acts for it.
func TestSignedHostNeedsNoBearer(t *testing.T) {
	ts := trustServer(t, nil)
	h := newHost(ts, "m1")
	w := h.join()
	poll, _ := (&wire.PollRequest{WorkerID: w}).MarshalMsg(nil)
	if st, b := ts.do(h.request(wire.PathPoll, poll, h.key)); st != 200 {
		t.Fatalf("signed poll without a bearer: %d %+v", st, errorOf(t, b))
	}
	st, b := ts.post(wire.PathPoll, wire.ContentTypeMsgpack, poll)
	if e := errorOf(t, b); st != 401 || e.Error != plane.ErrSignatureRequired {
		t.Fatalf("bearer poll of a keyed worker: %d %+v", st, e)
	}
	// Through a relay: its token, the signature in the envelope's headers.
	req := h.request(wire.PathPoll, poll, h.key)
	req.Header.Set("Authorization", "Bearer "+relayToken)
	if st, b := ts.do(req); st != 200 {
		t.Fatalf("relayed signed poll: %d %+v", st, errorOf(t, b))
	}
	// A wrong credential beside a signature is refused, not ignored.
	req = h.request(wire.PathPoll, poll, h.key)
	req.Header.Set("Authorization", "Bearer wrong")
	if st, _ := ts.do(req); st != 401 {
		t.Fatalf("signed poll with a wrong bearer: %d", st)
	}
	// The bearer alone cannot take the machine over.
	st, b = ts.post(wire.PathHello, wire.ContentTypeMsgpack, h.helloBody(false))
	var resp wire.HelloResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || st != 200 || resp.Reject == nil || resp.Reject.Code != wire.RejectEnrollSignatureRequired {
		t.Fatalf("bearer hello of an enrolled machine: %d %+v %v", st, resp.Reject, err)
	}
}

// A malformed signature header is a 401 that names it, before the body
// is read.
func TestMalformedSignatureHeader(t *testing.T) {
	ts := trustServer(t, nil)
	h := newHost(ts, "m1")
	req := h.request(wire.PathPoll, []byte{0x80}, h.key)
	req.Header.Set(identity.HeaderTimestamp, "soon")
	st, b := ts.do(req)
	if e := errorOf(t, b); st != 401 || e.Error != plane.ErrMalformedSignature || !strings.Contains(e.Message, identity.HeaderTimestamp) {
		t.Fatalf("malformed timestamp: %d %+v", st, e)
	}
}

// A signature outside the window is refused on its headers: the body,
// announced and never sent, is not waited for.
func TestStaleSignatureRefusedBeforeTheBody(t *testing.T) {
	ts := trustServer(t, nil)
	h := newHost(ts, "m1")
	h.join()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest("POST", ts.http.URL+wire.PathPoll, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1 << 20
	s := &identity.Signature{KeyID: h.keyID(), Timestamp: time.Now().Add(-time.Hour).Unix(),
		Nonce: "stale-nonce-00000001", Audience: ts.http.URL}
	identity.Sign(h.key, identity.NewRequest("POST", wire.PathPoll, nil), s)
	for k, v := range s.Header() {
		req.Header.Set(k, v)
	}
	st, b := ts.do(req)
	if e := errorOf(t, b); st != 401 || e.Error != plane.ErrSignatureExpired || !strings.Contains(e.Message, "check the host's clock") {
		t.Fatalf("stale signature: %d %+v", st, e)
	}
}

// A request signed by one worker's key acting for another is refused 403
// and logged at warn with both worker ids.
func TestForgeryIsLoggedWithBothWorkers(t *testing.T) {
	var log testkit.SyncBuffer
	ts := trustServer(t, &log)
	a, b := newHost(ts, "m1"), newHost(ts, "m2")
	wa, wb := a.join(), b.join()
	poll, _ := (&wire.PollRequest{WorkerID: wb}).MarshalMsg(nil)
	st, body := ts.do(a.request(wire.PathPoll, poll, a.key))
	if e := errorOf(t, body); st != 403 || e.Error != plane.ErrWorkerMismatch {
		t.Fatalf("poll of %s signed by %s: %d %+v", wb, wa, st, e)
	}
	out := log.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "signer="+wa) || !strings.Contains(out, "target="+wb) {
		t.Fatalf("log does not name both workers:\n%s", out)
	}
}

// Enrolling hellos are limited per transport peer: the eleventh in a
// minute is a 429 with Retry-After, before the plane sees it.
func TestEnrolmentIsRateLimited(t *testing.T) {
	ts := trustServer(t, nil)
	h := newHost(ts, "m1")
	for i := range EnrollPerMinute + 1 {
		req := h.request(wire.PathHello, h.helloBody(true), h.key)
		req.Header.Set(identity.HeaderEnrollToken, strings.Repeat("0", 64))
		resp, err := ts.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 200 // invalid_enroll_token, as a reject
		if i == EnrollPerMinute {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("enrolling hello %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if want == 429 && resp.Header.Get("Retry-After") != strconv.Itoa(enrollRetryAfterS) {
			t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
		}
	}
}

func TestEnrollLimiterStaysBounded(t *testing.T) {
	var l enrollLimiter
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxEnrollPeers {
		if !l.allow(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now) {
			t.Fatalf("peer %d refused", i)
		}
	}
	if l.allow("192.0.2.1", now) {
		t.Fatal("a peer past the bound was let in")
	}
	if !l.allow("192.0.2.1", now.Add(time.Minute)) || len(l.counts) != 1 {
		t.Fatalf("the next minute starts empty: %d peers", len(l.counts))
	}
}

// Rotation over HTTP: signed by the outgoing key, the new key's proof in
// its header; then revocation refuses the key with key_revoked.
func TestRotateThenRevoke(t *testing.T) {
	ts := trustServer(t, nil)
	h := newHost(ts, "m1")
	w := h.join()
	seed := sha256.Sum256([]byte("the next key"))
	next := ed25519.NewKeyFromSeed(seed[:])
	body, _ := (&wire.KeyRotationRequest{WorkerID: w, NewPublicKey: identity.EncodePublicKey(next.Public().(ed25519.PublicKey)),
		OldKeyID: h.keyID()}).MarshalMsg(nil)
	req := h.request(wire.PathKeys, body, h.key)
	proof, err := identity.ParseSignature(req.Header.Values)
	if err != nil {
		t.Fatal(err)
	}
	identity.Sign(next, identity.NewRequest("POST", wire.PathKeys, body), &proof)
	req.Header.Set(identity.HeaderNewKeySignature, identity.EncodeSignature(proof.Sig[:]))
	st, b := ts.do(req)
	var resp wire.KeyRotationResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || st != 200 || resp.Reject != nil || string(resp.KeyID) != identity.KeyID(next.Public().(ed25519.PublicKey)) {
		t.Fatalf("rotation: %d %+v %v", st, resp, err)
	}
	var rev operator.KeyRevoked
	if st := ts.admin("POST", strings.Replace(operator.PathRevokeKey, "{id}", w, 1), struct{}{}, &rev); st != 200 || len(rev.KeyIDs) != 2 {
		t.Fatalf("revoke: %d %+v", st, rev)
	}
	poll, _ := (&wire.PollRequest{WorkerID: w}).MarshalMsg(nil)
	for _, key := range []ed25519.PrivateKey{next, h.key} {
		st, b := ts.do(h.request(wire.PathPoll, poll, key))
		if e := errorOf(t, b); st != 401 || e.Error != plane.ErrKeyRevoked {
			t.Fatalf("poll signed by a revoked key: %d %+v", st, e)
		}
	}
}

// The token list never shows a secret; without a CA fingerprint no token
// is minted at all.
func TestTokenListAndCA(t *testing.T) {
	ts := trustServer(t, nil)
	tok := mintToken(ts, operator.TokenRequest{TTLS: 60, Queue: "gpu", Tags: []string{"site=lab"}})
	req, _ := http.NewRequest("GET", ts.http.URL+operator.PathTokens, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	st, b := ts.do(req)
	var list []operator.Token
	if err := json.Unmarshal(b, &list); err != nil || st != 200 || len(list) != 1 || list[0].State != operator.TokenUnused || list[0].Queue != "gpu" {
		t.Fatalf("tokens: %d %s", st, b)
	}
	if bytes.Contains(b, []byte(tok.Secret)) || bytes.Contains(b, []byte(identity.SecretHash(tok.Secret))) {
		t.Fatalf("the token list shows the secret or its hash: %s", b)
	}
	bare := newTestServer(t, nil, nil)
	if st := bare.admin("POST", operator.PathTokens, operator.TokenRequest{}, nil); st != http.StatusConflict {
		t.Fatalf("mint without a CA fingerprint: %d", st)
	}
}

// A presign signed by a key no one holds is refused: a signature lets a
// request past the bearer check only to be verified by the plane.
func TestPresignVerifiesSignature(t *testing.T) {
	ts := trustServer(t, nil)
	stranger := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	h := newHost(ts, "m1")
	body, _ := (&wire.PresignRequest{Op: "get", Key: "k"}).MarshalMsg(nil)
	st, b := ts.do(h.request(wire.PathPresign("ns"), body, stranger))
	if e := errorOf(t, b); st != 401 || e.Error != plane.ErrUnknownKey {
		t.Fatalf("presign signed by a stranger: %d %+v", st, e)
	}
}

// A log chunk is signed over the path of the stdout_url serve handed out;
// behind a proxy that strips the public URL's path, serve sees the route
// alone and still verifies it.
func TestChunkSignedOverItsSinkPath(t *testing.T) {
	ts := trustServer(t, nil, func(c *Config) { c.PublicURL += "/nymph" })
	h := newHost(ts, "m1")
	w := h.join()
	var acc operator.ExecAccepted
	if st := ts.admin("POST", strings.Replace(operator.PathExec, "{id}", w, 1), operator.ExecRequest{Command: "true", Stream: true}, &acc); st != 200 {
		t.Fatalf("exec: %d", st)
	}
	poll, _ := (&wire.PollRequest{WorkerID: w}).MarshalMsg(nil)
	st, b := ts.do(h.request(wire.PathPoll, poll, h.key))
	var resp wire.PollResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || st != 200 || len(resp.Commands) != 1 {
		t.Fatalf("poll: %d %v", st, err)
	}
	exec := wire.Dispatch(resp.Commands[0]).(wire.ExecCommand).Body
	sink, err := url.Parse(exec.Log.StdoutURL)
	if err != nil || !strings.HasPrefix(sink.Path, "/nymph/") {
		t.Fatalf("stdout_url %q: %v", exec.Log.StdoutURL, err)
	}
	req := h.request(sink.Path, []byte("out"), h.key)
	req.URL.Path = strings.TrimPrefix(sink.Path, "/nymph") // as the proxy passes it on
	if st, b := ts.do(req); st != 200 {
		t.Fatalf("chunk: %d %+v", st, errorOf(t, b))
	}
}
