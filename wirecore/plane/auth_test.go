package plane_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// A full nonce memory refuses a signed request 503 with Retry-After
// rather than forget a nonce that could still be replayed; once the
// window passes, it has room again.
func TestNonceMemoryFull(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{4}), Audience: transcriptAudience, MaxNonces: 1})
	seed := sha256.Sum256([]byte("full key"))
	key := ed25519.NewKeyFromSeed(seed[:])
	secret := strings.Repeat("f0", identity.SecretBytes)
	p.Step(t0, plane.CreateToken{Req: 1, SecretHash: identity.SecretHash(secret)})
	hello := helloReq("m1")
	pub := identity.EncodePublicKey(key.Public().(ed25519.PublicKey))
	hello.PublicKey = &pub
	raw, _ := hello.MarshalMsg(nil)
	a := benchSigned(key, wire.PathHello, raw, 0)
	a.EnrollSecret = secret
	eff := p.Step(t0, plane.Hello{Req: 2, Body: hello, Auth: a})
	worker := *eff[len(eff)-1].(plane.Reply).Body.(wire.HelloResponse).WorkerID
	body := wire.PollRequest{WorkerID: worker}
	raw, _ = body.MarshalMsg(nil)
	eff = p.Step(t0, plane.Poll{Req: 3, Body: body, Auth: benchSigned(key, wire.PathPoll, raw, 1)})
	r := eff[len(eff)-1].(plane.Reply)
	if e, ok := r.Body.(plane.ErrorBody); r.Status != plane.StatusServiceUnavailable || !ok || e.Error != plane.ErrNonceMemoryFull || r.RetryAfterS != 1 {
		t.Fatalf("poll past a full nonce memory: %+v", r)
	}
	later := t0.Add(identity.Window + time.Second)
	s := benchSigned(key, wire.PathPoll, raw, 2)
	s.Sig.Timestamp = later.Unix()
	identity.Sign(key, s.Req, s.Sig)
	eff = p.Step(later, plane.Poll{Req: 4, Body: body, Auth: s})
	if r := eff[len(eff)-1].(plane.Reply); r.Status != plane.StatusOK {
		t.Fatalf("poll once the window passed: %+v", r)
	}
}
