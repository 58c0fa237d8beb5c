package identity_test

import (
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
)

// BenchmarkSign is the daemon's cost per request: hash the body, build
// the canonical string, sign.
func BenchmarkSign(b *testing.B) {
	key, s := signedSeed()
	body := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		identity.Sign(key, identity.NewRequest("POST", "/v1/daemon/poll", body), &s)
	}
}

// BenchmarkVerify is the control plane's cost per signed request: parse
// the headers, check the window and the nonce, verify.
func BenchmarkVerify(b *testing.B) {
	key, s := signedSeed()
	pub := key.Public().(ed25519.PublicKey)
	body := make([]byte, 512)
	req := identity.NewRequest("POST", "/v1/daemon/poll", body)
	identity.Sign(key, req, &s)
	hdr := http.Header{}
	for k, v := range s.Header() {
		hdr.Set(k, v)
	}
	now := time.Unix(s.Timestamp, 0)
	b.ReportAllocs()
	for b.Loop() {
		got, err := identity.ParseSignature(hdr.Values)
		if err != nil || !identity.Fresh(got.Timestamp, now) || !identity.Verify(pub, identity.NewRequest("POST", "/v1/daemon/poll", body), &got) {
			b.Fatal("refused")
		}
	}
}
