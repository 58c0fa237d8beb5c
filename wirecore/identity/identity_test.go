package identity_test

import (
	"crypto/ed25519"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
)

// testKey is a fixed key, so the worked example below is reproducible.
func testKey() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func signed(t *testing.T, body string) (identity.Request, identity.Signature) {
	t.Helper()
	key := testKey()
	req := identity.NewRequest("POST", "/v1/daemon/poll", []byte(body))
	s := identity.Signature{KeyID: identity.KeyID(key.Public().(ed25519.PublicKey)), Timestamp: 1767225600,
		Nonce: "AAECAwQFBgcICQoLDA0ODw", Audience: "https://plane.example:8383"}
	identity.Sign(key, req, &s)
	return req, s
}

// TestCanonicalString pins the canonical string byte for byte: it is the
// contract a peer's signer is written to (docs/protocol.md, "Request
// signatures").
func TestCanonicalString(t *testing.T) {
	req, s := signed(t, "hello")
	got := string(identity.AppendCanonical(nil, req, &s))
	want := "nymph-request-v1\nPOST\n/v1/daemon/poll\n" +
		"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n" +
		"1767225600\nAAECAwQFBgcICQoLDA0ODw\nhttps://plane.example:8383\n" + s.KeyID
	if got != want {
		t.Fatalf("canonical string:\n%q\nwant\n%q", got, want)
	}
	// The worked example of docs/protocol.md, "Request signatures".
	key := testKey()
	if got := identity.EncodePublicKey(key.Public().(ed25519.PublicKey)); got != "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg" {
		t.Errorf("public key %s", got)
	}
	if got := string(identity.EncodeSeed(key)); got != "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n" {
		t.Errorf("identity file %q", got)
	}
	h := s.Header()
	if s.KeyID != "ed25519-56475aa75463474c0285df5dbf2bcab7" ||
		h[identity.HeaderSignature] != "4eg_BhMxKshvcsMj9k04sZ1riD0Z1Gj0lUwiJHUdAbbQeKv_MDmH7BwvcdkwgYhsEUWBL118xil0pc7_r8AbBw" {
		t.Fatalf("key id %s, signature %s: not the documented example", s.KeyID, h[identity.HeaderSignature])
	}
}

func TestVerifyRefusesAnyChange(t *testing.T) {
	req, s := signed(t, "hello")
	pub := testKey().Public().(ed25519.PublicKey)
	if !identity.Verify(pub, req, &s) {
		t.Fatal("a fresh signature does not verify")
	}
	changes := map[string]func(*identity.Request, *identity.Signature){
		"body":      func(r *identity.Request, _ *identity.Signature) { r.BodySHA256[0] ^= 1 },
		"path":      func(r *identity.Request, _ *identity.Signature) { r.Path = "/v1/daemon/ack" },
		"method":    func(r *identity.Request, _ *identity.Signature) { r.Method = "GET" },
		"timestamp": func(_ *identity.Request, s *identity.Signature) { s.Timestamp++ },
		"nonce":     func(_ *identity.Request, s *identity.Signature) { s.Nonce = "AAECAwQFBgcICQoLDA0ODx" },
		"audience":  func(_ *identity.Request, s *identity.Signature) { s.Audience = "https://other:8383" },
		"key id":    func(_ *identity.Request, s *identity.Signature) { s.KeyID = "ed25519-" + strings.Repeat("0", 32) },
		"signature": func(_ *identity.Request, s *identity.Signature) { s.Sig[3] ^= 1 },
	}
	for name, change := range changes {
		r, sig := req, s
		change(&r, &sig)
		if identity.Verify(pub, r, &sig) {
			t.Errorf("a changed %s still verifies", name)
		}
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if identity.Verify(other, req, &s) {
		t.Error("another key verifies the signature")
	}
	if identity.Verify(pub[:10], req, &s) {
		t.Error("a short key verifies")
	}
}

func TestParseSignatureRoundTrip(t *testing.T) {
	req, s := signed(t, "hello")
	h := http.Header{}
	for k, v := range s.Header() {
		h.Set(k, v)
	}
	got, err := identity.ParseSignature(h.Values)
	if err != nil {
		t.Fatal(err)
	}
	if got != s || !identity.Verify(testKey().Public().(ed25519.PublicKey), req, &got) {
		t.Fatalf("parsed %+v, want %+v", got, s)
	}
}

func TestParseSignatureRefusals(t *testing.T) {
	_, s := signed(t, "hello")
	base := s.Header()
	if _, err := identity.ParseSignature(http.Header{}.Values); !errors.Is(err, identity.ErrNoSignature) {
		t.Fatalf("no headers: %v", err)
	}
	cases := []struct {
		header, value, want string
	}{
		{identity.HeaderKeyID, "", "missing"},
		{identity.HeaderKeyID, "ed25519-XYZ", "not a key id"},
		{identity.HeaderKeyID, strings.Repeat("k", 65), "at most 64"},
		{identity.HeaderTimestamp, "-5", "decimal digits"},
		{identity.HeaderTimestamp, "1.5", "decimal digits"},
		{identity.HeaderTimestamp, "99999999999999999999", "characters"},
		{identity.HeaderTimestamp, "9999999999999999999", "out of range"},
		{identity.HeaderNonce, "short", "characters"},
		{identity.HeaderNonce, strings.Repeat("a", 65), "characters"},
		{identity.HeaderNonce, strings.Repeat("a", 20) + "+/", "base64url"},
		{identity.HeaderAudience, "https://a b", "printable"},
		{identity.HeaderAudience, strings.Repeat("a", 257), "at most 256"},
		{identity.HeaderSignature, "abc", "characters"},
		{identity.HeaderSignature, strings.Repeat("+", 86), "base64url"},
	}
	for _, c := range cases {
		h := http.Header{}
		for k, v := range base {
			h.Set(k, v)
		}
		if c.value == "" {
			h.Del(c.header)
		} else {
			h.Set(c.header, c.value)
		}
		_, err := identity.ParseSignature(h.Values)
		var he *identity.HeaderError
		if !errors.As(err, &he) || he.Header != c.header || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: %v, want a header error naming it with %q", c.header, c.value, err, c.want)
		}
	}
	h := http.Header{}
	for k, v := range base {
		h.Set(k, v)
	}
	h.Add(identity.HeaderNonce, base[identity.HeaderNonce])
	if _, err := identity.ParseSignature(h.Values); err == nil || !strings.Contains(err.Error(), "2 times") {
		t.Errorf("a repeated header: %v", err)
	}
}

func TestFresh(t *testing.T) {
	now := time.Unix(1767225600, 0)
	for d, want := range map[int64]bool{0: true, 60: true, -60: true, 61: false, -61: false} {
		if got := identity.Fresh(now.Unix()+d, now); got != want {
			t.Errorf("Fresh(now%+d) = %v, want %v", d, got, want)
		}
	}
}

func TestNonceMemory(t *testing.T) {
	var m identity.NonceMemory
	now := time.Unix(1767225600, 0)
	if err := m.Use("k1", "n1", now.Unix(), now); err != nil {
		t.Fatal(err)
	}
	if err := m.Use("k1", "n1", now.Unix(), now.Add(59*time.Second)); !errors.Is(err, identity.ErrReplayed) {
		t.Fatalf("a replay inside the window: %v", err)
	}
	if err := m.Use("k2", "n1", now.Unix(), now); err != nil {
		t.Fatalf("another key's equal nonce: %v", err)
	}
	// Once the timestamp can no longer be fresh, the nonce is forgotten.
	later := now.Add(identity.Window + 2*time.Second)
	if err := m.Use("k3", "n9", later.Unix(), later); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 1 {
		t.Fatalf("after the window %d nonces are remembered, want 1", m.Len())
	}
}

func TestNonceMemoryBounded(t *testing.T) {
	m := identity.NonceMemory{Max: 3}
	now := time.Unix(1767225600, 0)
	for _, n := range []string{"a", "b", "c"} {
		if err := m.Use("k", n, now.Unix(), now); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Use("k", "d", now.Unix(), now); !errors.Is(err, identity.ErrNonceMemoryFull) {
		t.Fatalf("past Max: %v", err)
	}
	later := now.Add(identity.Window + time.Second)
	if err := m.Use("k", "d", later.Unix(), later); err != nil {
		t.Fatalf("after the window frees the memory: %v", err)
	}
}

func TestJoinToken(t *testing.T) {
	secret, err := identity.NewSecret(make([]byte, identity.SecretBytes))
	if err != nil {
		t.Fatal(err)
	}
	fp := identity.SPKIFingerprint([]byte("spki"))
	tok, err := identity.ParseJoinToken(" " + strings.ToUpper(secret) + "." + fp + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if tok.Secret != secret || tok.Fingerprint != fp || tok.String() != secret+"."+fp {
		t.Fatalf("parsed %+v", tok)
	}
	if identity.SecretHash(secret) == secret || len(identity.SecretHash(secret)) != 64 {
		t.Fatal("the hash is not a SHA-256 hex digest")
	}
	for in, want := range map[string]string{
		"nodot":                                "no dot",
		secret + "." + fp[:10]:                 "CA fingerprint",
		secret[:10] + "." + fp:                 "secret",
		"a.b." + fp:                            "secret",
		secret + "." + strings.Repeat("g", 64): "CA fingerprint",
		strings.Repeat("x", 500):               "bytes",
	} {
		if _, err := identity.ParseJoinToken(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseJoinToken(%.20q…) = %v, want an error with %q", in, err, want)
		}
	}
	if !identity.SameFingerprint(fp, strings.ToUpper(fp)) || identity.SameFingerprint(fp, secret) {
		t.Error("SameFingerprint")
	}
}

func TestKeysRoundTrip(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	got, err := identity.DecodePublicKey(identity.EncodePublicKey(pub))
	if err != nil || !got.Equal(pub) {
		t.Fatalf("public key round trip: %v", err)
	}
	back, err := identity.DecodeSeed(identity.EncodeSeed(key))
	if err != nil || !back.Equal(key) {
		t.Fatalf("seed round trip: %v", err)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("+", 43)} {
		if _, err := identity.DecodePublicKey(bad); err == nil {
			t.Errorf("DecodePublicKey(%q) accepted", bad)
		}
		if _, err := identity.DecodeSeed([]byte(bad)); err == nil {
			t.Errorf("DecodeSeed(%q) accepted", bad)
		}
	}
}
