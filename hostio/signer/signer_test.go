package signer

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

type recorder struct {
	reqs  []*transport.Request
	reply func(*transport.Request) *transport.Response
}

func (r *recorder) RoundTrip(_ context.Context, req *transport.Request) (*transport.Response, error) {
	r.reqs = append(r.reqs, req)
	if r.reply != nil {
		return r.reply(req), nil
	}
	return &transport.Response{Status: 200}, nil
}
func (r *recorder) CanWithdraw() bool { return true }

func newKey(t *testing.T) ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// verified checks that req carries a signature that verifies under pub
// for path and returns it.
func verified(t *testing.T, req *transport.Request, pub ed25519.PublicKey, path string) identity.Signature {
	t.Helper()
	h := http.Header{}
	for k, v := range req.Headers {
		h.Set(k, v)
	}
	s, err := identity.ParseSignature(h.Values)
	if err != nil {
		t.Fatalf("signature headers: %v", err)
	}
	if !identity.Verify(pub, identity.NewRequest("POST", path, req.Body), &s) {
		t.Fatalf("signature of %s does not verify", path)
	}
	return s
}

func TestRequestsAreSignedForTheServersOrigin(t *testing.T) {
	key := newKey(t)
	rec := &recorder{}
	now := time.Unix(1767225600, 0)
	tr, err := New(Options{Next: rec, Key: key, ServerURL: "HTTPS://Plane.Example:8443/base/", Random: rand.Reader,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	orig := &transport.Request{Endpoint: wire.PathPoll, Body: []byte("body"), Headers: map[string]string{"X-LS-Other": "kept"}}
	if _, err := tr.RoundTrip(context.Background(), orig); err != nil {
		t.Fatal(err)
	}
	if len(orig.Headers) != 1 {
		t.Fatalf("the caller's headers were changed: %v", orig.Headers)
	}
	sent := rec.reqs[0]
	s := verified(t, sent, key.Public().(ed25519.PublicKey), wire.PathPoll)
	if s.Audience != "https://plane.example:8443" || s.Timestamp != now.Unix() || s.KeyID != tr.KeyID() {
		t.Fatalf("signature %+v", s)
	}
	if sent.Headers["X-LS-Other"] != "kept" {
		t.Fatal("an existing header was dropped")
	}
	// A log-sink URL is signed over its path, and each request has its own nonce.
	if _, err := tr.RoundTrip(context.Background(), &transport.Request{Endpoint: "https://plane.example:8443/v1/daemon/exec/e1/chunk?x=1", Body: []byte("log")}); err != nil {
		t.Fatal(err)
	}
	s2 := verified(t, rec.reqs[1], key.Public().(ed25519.PublicKey), "/v1/daemon/exec/e1/chunk")
	if s2.Nonce == s.Nonce {
		t.Fatal("two requests share a nonce")
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	key := newKey(t)
	for name, o := range map[string]Options{
		"no key":       {Next: &recorder{}, ServerURL: "https://p", Random: rand.Reader},
		"no random":    {Next: &recorder{}, Key: key, ServerURL: "https://p"},
		"relative url": {Next: &recorder{}, Key: key, ServerURL: "plane:8443", Random: rand.Reader},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRevokedIsReportedOnce(t *testing.T) {
	body, _ := (&wire.ValidationError{Error: wire.ErrKeyRevoked, Message: "revoked by the operator"}).MarshalMsg(nil)
	rec := &recorder{reply: func(*transport.Request) *transport.Response { return &transport.Response{Status: 401, Body: body} }}
	var got []string
	tr, err := New(Options{Next: rec, Key: newKey(t), ServerURL: "https://p", Random: rand.Reader,
		Revoked: func(m string) { got = append(got, m) }})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tr.RoundTrip(context.Background(), &transport.Request{Endpoint: wire.PathPoll}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0] != "revoked by the operator" {
		t.Fatalf("revoked reported %q", got)
	}
	// Any other 401 is not a revocation.
	other, _ := (&wire.ValidationError{Error: "signature_invalid"}).MarshalMsg(nil)
	rec.reply = func(*transport.Request) *transport.Response { return &transport.Response{Status: 401, Body: other} }
	got = nil
	tr2, _ := New(Options{Next: rec, Key: newKey(t), ServerURL: "https://p", Random: rand.Reader, Revoked: func(m string) { got = append(got, m) }})
	_, _ = tr2.RoundTrip(context.Background(), &transport.Request{Endpoint: wire.PathPoll})
	if len(got) != 0 {
		t.Fatal("another 401 was taken for a revocation")
	}
}

func TestRotateProvesBothKeysAndSwitches(t *testing.T) {
	oldKey, newK := newKey(t), newKey(t)
	rec := &recorder{}
	rec.reply = func(req *transport.Request) *transport.Response {
		if req.Endpoint != wire.PathKeys {
			return &transport.Response{Status: 200}
		}
		var in wire.KeyRotationRequest
		if _, err := in.UnmarshalMsg(req.Body); err != nil {
			t.Fatal(err)
		}
		pub, err := identity.DecodePublicKey(in.NewPublicKey)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := (&wire.KeyRotationResponse{KeyID: wire.Text(identity.KeyID(pub))}).MarshalMsg(nil)
		return &transport.Response{Status: 200, Body: out}
	}
	tr, err := New(Options{Next: rec, Key: oldKey, ServerURL: "https://p", Random: rand.Reader})
	if err != nil {
		t.Fatal(err)
	}
	oldID := tr.KeyID()
	var stored ed25519.PrivateKey
	id, err := tr.Rotate(context.Background(), "w1", newK, func(k ed25519.PrivateKey) error { stored = k; return nil })
	if err != nil {
		t.Fatal(err)
	}
	keysReq := rec.reqs[0]
	s := verified(t, keysReq, oldKey.Public().(ed25519.PublicKey), wire.PathKeys)
	if s.KeyID != oldID {
		t.Fatalf("keys request signed by %s, want the outgoing %s", s.KeyID, oldID)
	}
	proof, err := identity.DecodeSignature(keysReq.Headers[identity.HeaderNewKeySignature])
	if err != nil {
		t.Fatal(err)
	}
	s.Sig = proof
	if !identity.Verify(newK.Public().(ed25519.PublicKey), identity.NewRequest("POST", wire.PathKeys, keysReq.Body), &s) {
		t.Fatal("the new key's proof does not verify over the same canonical string")
	}
	if !bytes.Equal(stored, newK) || id != tr.KeyID() || id == oldID {
		t.Fatalf("after rotation: stored %v, id %s, current %s", stored != nil, id, tr.KeyID())
	}
	if _, err := tr.RoundTrip(context.Background(), &transport.Request{Endpoint: wire.PathPoll}); err != nil {
		t.Fatal(err)
	}
	verified(t, rec.reqs[1], newK.Public().(ed25519.PublicKey), wire.PathPoll)
}

func TestRotateRefusedKeepsTheOldKey(t *testing.T) {
	oldKey := newKey(t)
	out, _ := (&wire.KeyRotationResponse{Reject: &wire.Reject{Code: "key_id_mismatch", Message: "no"}}).MarshalMsg(nil)
	rec := &recorder{reply: func(*transport.Request) *transport.Response { return &transport.Response{Status: 200, Body: out} }}
	tr, _ := New(Options{Next: rec, Key: oldKey, ServerURL: "https://p", Random: rand.Reader})
	before := tr.KeyID()
	stored := false
	_, err := tr.Rotate(context.Background(), "w1", newKey(t), func(ed25519.PrivateKey) error { stored = true; return nil })
	if err == nil || stored || tr.KeyID() != before {
		t.Fatalf("a refused rotation: err %v, stored %v, key changed %v", err, stored, tr.KeyID() != before)
	}
	rec.reply = func(*transport.Request) *transport.Response { return &transport.Response{Status: 503} }
	if _, err := tr.Rotate(context.Background(), "w1", newKey(t), func(ed25519.PrivateKey) error { return errors.New("x") }); err == nil || tr.KeyID() != before {
		t.Fatal("a failed rotation switched keys")
	}
}
