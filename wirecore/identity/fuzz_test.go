package identity_test

import (
	"crypto/ed25519"
	"net/http"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/identity"
)

// FuzzParseSignature feeds the signature headers arbitrary values: the
// parser never panics, and what it accepts is within every limit and
// round-trips through Header.
func FuzzParseSignature(f *testing.F) {
	_, s := signedSeed()
	h := s.Header()
	f.Add(h[identity.HeaderKeyID], h[identity.HeaderTimestamp], h[identity.HeaderNonce], h[identity.HeaderAudience], h[identity.HeaderSignature])
	f.Add("", "", "", "", "")
	f.Add("ed25519-", "-1", "a", " ", "=")
	f.Fuzz(func(t *testing.T, keyID, ts, nonce, aud, sig string) {
		hdr := http.Header{}
		for name, v := range map[string]string{identity.HeaderKeyID: keyID, identity.HeaderTimestamp: ts,
			identity.HeaderNonce: nonce, identity.HeaderAudience: aud, identity.HeaderSignature: sig} {
			if v != "" {
				hdr[name] = []string{v}
			}
		}
		got, err := identity.ParseSignature(hdr.Values)
		if err != nil {
			return
		}
		if len(got.KeyID) > identity.MaxKeyIDBytes || len(got.Nonce) > identity.MaxNonceBytes ||
			len(got.Audience) > identity.MaxAudienceBytes || got.Timestamp < 0 {
			t.Fatalf("accepted past a limit: %+v", got)
		}
		back := got.Header()
		if back[identity.HeaderSignature] != sig || back[identity.HeaderKeyID] != keyID || back[identity.HeaderNonce] != nonce {
			t.Fatalf("round trip changed the headers: %v", back)
		}
	})
}

// FuzzParseJoinToken: never panics; an accepted token prints back to the
// input, trimmed, its fingerprint lowered, and its secret is valid.
func FuzzParseJoinToken(f *testing.F) {
	f.Add(strings.Repeat("a", 64) + "." + strings.Repeat("b", 64))
	f.Add("x.y")
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		tok, err := identity.ParseJoinToken(in)
		if err != nil {
			return
		}
		trimmed := strings.TrimSpace(in)
		dot := strings.LastIndexByte(trimmed, '.')
		if tok.String() != trimmed[:dot]+"."+strings.ToLower(trimmed[dot+1:]) || identity.ValidSecret(tok.Secret) != nil {
			t.Fatalf("%q parsed to %q", in, tok.String())
		}
		if _, err := identity.ParseJoinToken(tok.String()); err != nil {
			t.Fatalf("a printed token does not parse: %v", err)
		}
	})
}

func signedSeed() (ed25519.PrivateKey, identity.Signature) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	s := identity.Signature{KeyID: identity.KeyID(key.Public().(ed25519.PublicKey)), Timestamp: 1767225600,
		Nonce: "AAECAwQFBgcICQoLDA0ODw", Audience: "https://plane.example"}
	identity.Sign(key, identity.NewRequest("POST", "/v1/daemon/poll", nil), &s)
	return key, s
}
