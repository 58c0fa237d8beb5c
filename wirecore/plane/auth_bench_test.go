package plane_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkPollAuth measures what a signature costs a poll in the core: a
// poll that returns at once (timeout 0, nothing queued) from a bearer
// worker, and the same poll signed by an enrolled worker's key, verified
// (key lookup, window, audience, Ed25519, nonce memory) on every step.
// The signatures are made before the clock starts; each has its own
// nonce, as a daemon's do.
func BenchmarkPollAuth(b *testing.B) {
	for _, signed := range []bool{false, true} {
		name := "unsigned"
		if signed {
			name = "signed"
		}
		b.Run(name, func(b *testing.B) {
			p, workerID, key := benchWorker(b, signed)
			body := wire.PollRequest{WorkerID: workerID}
			raw, err := body.MarshalMsg(nil)
			if err != nil {
				b.Fatal(err)
			}
			auths := make([]plane.Auth, b.N)
			for i := range auths {
				auths[i] = plane.Auth{Bearer: true}
				if signed {
					auths[i] = benchSigned(key, wire.PathPoll, raw, i)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				eff := p.Step(t0, plane.Poll{Req: plane.RequestID(i + 10), Body: body, Auth: auths[i]})
				if r, ok := eff[len(eff)-1].(plane.Reply); !ok || r.Status != plane.StatusOK {
					b.Fatalf("poll %d: %+v", i, eff[len(eff)-1])
				}
			}
		})
	}
}

// benchWorker is a plane holding one worker: a bearer worker, or one
// enrolled with a key of a fixed seed (returned).
func benchWorker(b *testing.B, keyed bool) (*plane.Plane, string, ed25519.PrivateKey) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{3}), Audience: transcriptAudience})
	hello := helloReq("m1")
	if !keyed {
		eff := p.Step(t0, plane.Hello{Req: 1, Body: hello, Auth: bearer})
		return p, *eff[len(eff)-1].(plane.Reply).Body.(wire.HelloResponse).WorkerID, nil
	}
	seed := sha256.Sum256([]byte("bench key"))
	key := ed25519.NewKeyFromSeed(seed[:])
	secret := strings.Repeat("be", identity.SecretBytes)
	p.Step(t0, plane.CreateToken{Req: 1, SecretHash: identity.SecretHash(secret)})
	pub := identity.EncodePublicKey(key.Public().(ed25519.PublicKey))
	hello.PublicKey = &pub
	raw, err := hello.MarshalMsg(nil)
	if err != nil {
		b.Fatal(err)
	}
	a := benchSigned(key, wire.PathHello, raw, -1)
	a.EnrollSecret = secret
	eff := p.Step(t0, plane.Hello{Req: 2, Body: hello, Auth: a})
	resp := eff[len(eff)-1].(plane.Reply).Body.(wire.HelloResponse)
	if resp.Reject != nil {
		b.Fatalf("enrol: %+v", resp.Reject)
	}
	return p, *resp.WorkerID, key
}

func benchSigned(key ed25519.PrivateKey, path string, body []byte, n int) plane.Auth {
	a := plane.Auth{Req: identity.NewRequest("POST", path, body)}
	a.Sig = &identity.Signature{KeyID: identity.KeyID(key.Public().(ed25519.PublicKey)), Timestamp: t0.Unix(),
		Nonce: fmt.Sprintf("bench-nonce-%010d", n), Audience: transcriptAudience}
	identity.Sign(key, a.Req, a.Sig)
	return a
}
