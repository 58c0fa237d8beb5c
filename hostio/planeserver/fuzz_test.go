package planeserver

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Each daemon route's body is fuzzed as its handler reads it: the same
// decoding, then the event stepped into a plane core that holds a worker,
// a delivered exec and a running invocation (so that acks, results and
// polls can find what they name). Every input must end in an answer the
// route can encode, with a status the protocol documents, and a 422 must
// name its field. The seeds — golden vectors, and bodies naming the
// fixture's ids — run with every `go test`.

var fuzzT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fuzzFixture is a plane core with one worker, one delivered streamed
// exec and one running invocation, the same on every call.
type fuzzFixture struct {
	p                    *plane.Plane
	worker, exec, invoke string
	// keyed is a second worker, enrolled with key.
	keyed string
	key   ed25519.PrivateKey
	next  plane.RequestID
}

// fuzzBearer is the Auth of a request with a valid daemon bearer.
var fuzzBearer = plane.Auth{Bearer: true}

func newFuzzFixture(t testing.TB) *fuzzFixture {
	fx := &fuzzFixture{p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{9}), MaxWorkers: 2})}
	r := fx.step(t, plane.Hello{Body: *helloBody("m1"), Auth: fuzzBearer})
	fx.worker = *r.Body.(wire.HelloResponse).WorkerID
	fx.enrolKeyed(t)
	r = fx.step(t, plane.EnqueueExec{WorkerID: fx.worker, Body: operator.ExecRequest{Command: "true", Stream: true}})
	fx.exec = r.Body.(operator.ExecAccepted).ExecID
	r = fx.step(t, plane.EnqueueRun{Body: operator.RunRequest{Function: wire.Function{Module: "m", Qualname: "f"}}})
	fx.invoke = r.Body.(operator.Invocation).ID
	if r := fx.step(t, plane.Poll{Body: wire.PollRequest{WorkerID: fx.worker}, Auth: fuzzBearer}); len(r.Body.(wire.PollResponse).Commands) != 2 {
		t.Fatalf("fixture poll: %+v", r.Body)
	}
	return fx
}

// step applies one request, named by the fixture's next id, and returns
// its answer (a Park counts as a 200 to come).
func (fx *fuzzFixture) step(t testing.TB, req plane.Request) plane.Reply {
	fx.next++
	ev := req.Named(fx.next)
	for _, eff := range fx.p.Step(fuzzT0, ev) {
		switch e := eff.(type) {
		case plane.Reply:
			if e.Req == fx.next {
				return e
			}
		case plane.Park:
			if e.Req == fx.next {
				return plane.Reply{Req: e.Req, Status: plane.StatusOK, Body: plane.OK{}}
			}
		}
	}
	t.Fatalf("no answer to %T", ev)
	return plane.Reply{}
}

// enrolKeyed enrols machine m2 with a key of a fixed seed, through a
// join token, as a daemon's first signed hello does.
func (fx *fuzzFixture) enrolKeyed(t testing.TB) {
	seed := sha256.Sum256([]byte("fuzz fixture key"))
	fx.key = ed25519.NewKeyFromSeed(seed[:])
	secret := strings.Repeat("5e", identity.SecretBytes)
	fx.step(t, plane.CreateToken{SecretHash: identity.SecretHash(secret)})
	body := helloBody("m2")
	pub := identity.EncodePublicKey(fx.key.Public().(ed25519.PublicKey))
	body.PublicKey = &pub
	raw, err := body.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := fx.signed(wire.PathHello, raw, 1)
	a.EnrollSecret = secret
	r := fx.step(t, plane.Hello{Body: *body, Auth: a})
	if resp := r.Body.(wire.HelloResponse); resp.Reject != nil || resp.KeyID == nil {
		t.Fatalf("fixture enrolment: %+v", resp.Reject)
	}
	fx.keyed = *r.Body.(wire.HelloResponse).WorkerID
}

// signed is the Auth of a request on path with body, signed by the
// fixture's key with nonce n.
func (fx *fuzzFixture) signed(path string, body []byte, n int) plane.Auth {
	a := plane.Auth{Req: identity.NewRequest("POST", path, body)}
	a.Sig = &identity.Signature{KeyID: identity.KeyID(fx.key.Public().(ed25519.PublicKey)), Timestamp: fuzzT0.Unix(),
		Nonce: fmt.Sprintf("fuzz-nonce-%08d", n)}
	identity.Sign(fx.key, a.Req, a.Sig)
	return a
}

// checkAnswer holds a route's answer to the protocol: a documented
// status, a body the route can encode, a 422 that names its field, a
// credentials refusal that has a code and a message.
func checkAnswer(t *testing.T, r plane.Reply, asJSON bool) {
	t.Helper()
	switch r.Status {
	case plane.StatusOK, plane.StatusNotFound, plane.StatusServiceUnavailable:
	case plane.StatusUnauthorized, plane.StatusForbidden:
		if e, ok := r.Body.(plane.ErrorBody); !ok || e.Error == "" || e.Message == "" {
			t.Fatalf("%d %#v", r.Status, r.Body)
		}
	case plane.StatusUnprocessableEntity:
		v, ok := r.Body.(wire.ValidationError)
		if !ok || v.Field == "" || v.Error == "" || v.Message == "" || len(v.Message) > 512 {
			t.Fatalf("422 %#v", r.Body)
		}
	default:
		t.Fatalf("status %d %#v", r.Status, r.Body)
	}
	var err error
	if asJSON {
		_, err = json.Marshal(r.Body)
	} else {
		_, err = plane.AppendMsgpack(nil, r.Body)
	}
	if err != nil {
		t.Fatalf("the answer %#v cannot be encoded: %v", r.Body, err)
	}
}

// checkRoute decodes body as the route's handler does (request) and, for a
// body it would not refuse as malformed (400), checks the core's answer.
func checkRoute(t *testing.T, request bodyRequest, execID string, body []byte, asJSON bool) {
	t.Helper()
	req, err := request(execID, body, asJSON)
	if err != nil {
		return // 400 malformed
	}
	checkAnswer(t, newFuzzFixture(t).step(t, req.Authed(fuzzBearer)), asJSON)
}

func seedGoldens(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", "..", "wirecore", "wire", "testdata", n+".msgpack"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
}

func seedMsg(f *testing.F, m msgp.Marshaler) {
	b, err := m.MarshalMsg(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

func FuzzHelloBody(f *testing.F) {
	seedGoldens(f, "hello_request", "hello_request_minimal")
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	seedMsg(f, helloBody("m1"))
	seedMsg(f, helloBody("m2"))
	f.Fuzz(func(t *testing.T, body []byte) { checkRoute(t, helloRequest, "", body, false) })
}

func FuzzPollBody(f *testing.F) {
	seedGoldens(f, "poll_request")
	fx := newFuzzFixture(f)
	seedMsg(f, &wire.PollRequest{WorkerID: fx.worker, Queue: "default", TimeoutS: 20,
		Invocations:         []wire.InvocationStatus{{InvocationID: fx.invoke, State: wire.StateRunning, StartedAt: 1764410000.5}},
		UpdatedCapabilities: &wire.Capabilities{Runners: []string{"process"}}})
	seedMsg(f, &wire.PollRequest{WorkerID: fx.worker})
	f.Fuzz(func(t *testing.T, body []byte) { checkRoute(t, pollRequest, "", body, false) })
}

func FuzzAckBody(f *testing.F) {
	seedGoldens(f, "ack_failed", "ack_succeeded")
	fx := newFuzzFixture(f)
	seedMsg(f, &wire.Ack{InvocationID: fx.invoke, State: wire.StateSucceeded, ResultBlob: wire.SharedBlob("ok"), WorkerID: fx.worker})
	seedMsg(f, &wire.Ack{InvocationID: fx.invoke, State: wire.StateFailed, Error: &wire.ErrorInfo{TypeName: "ValueError", Message: "no"}})
	seedMsg(f, &wire.Ack{InvocationID: "setup-01KBX3Z8Q0P4N7RJ2C5V6W9Y0Z", State: wire.StateSucceeded, WorkerID: fx.worker})
	f.Fuzz(func(t *testing.T, body []byte) { checkRoute(t, ackRequest, "", body, false) })
}

// FuzzExecResultBody fuzzes the body (msgpack or JSON, as the request's
// content type says) and the exec id of the result URL.
func FuzzExecResultBody(f *testing.F) {
	fx := newFuzzFixture(f)
	for _, n := range []string{"exec_result", "exec_result_timeout"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "wirecore", "wire", "testdata", n+".msgpack"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(false, fx.exec, b)
		f.Add(false, "no-such-exec", b)
	}
	f.Add(true, fx.exec, []byte(`{"exit_code": 0, "stdout": "hi\n", "stderr": "", "duration_ms": 12.5}`))
	f.Add(true, fx.exec, []byte(`{"exit_code": 1e300, "duration_ms": -1}`))
	f.Add(true, "a/b", []byte(`{}`))
	f.Fuzz(func(t *testing.T, asJSON bool, execID string, body []byte) {
		checkRoute(t, execResultRequest, execID, body, asJSON)
	})
}

// FuzzPresignBody fuzzes the presign body as the route decodes it; what
// the payload store makes of it is the store's own tests' business.
func FuzzPresignBody(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("..", "..", "wirecore", "wire", "testdata", "presign_request.msgpack"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(false, b)
	f.Add(false, msgp.AppendBool(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "overwrite"), true))
	f.Add(false, []byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add(true, []byte(`{"op": "put", "key": "job-1/args", "size": 5, "overwrite": true}`))
	f.Add(true, []byte(`{"op": "get", "key": "../../nymph.db"}`))
	f.Fuzz(func(t *testing.T, asJSON bool, body []byte) { _, _ = decodePresign(body, asJSON) })
}

// FuzzKeysBody fuzzes a key rotation as the route reads it: the body and
// the new key's proof header, signed by the fixture's enrolled key, so
// the rotation gets past the signature to the body's checks.
func FuzzKeysBody(f *testing.F) {
	seedGoldens(f, "key_rotation_request")
	fx := newFuzzFixture(f)
	newKey := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	seedMsg(f, &wire.KeyRotationRequest{WorkerID: fx.keyed, NewPublicKey: identity.EncodePublicKey(newKey.Public().(ed25519.PublicKey))})
	seedMsg(f, &wire.KeyRotationRequest{WorkerID: fx.worker, NewPublicKey: "short"})
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := keysRequest("", body, false)
		if err != nil {
			return // 400 malformed
		}
		fx := newFuzzFixture(t)
		a := fx.signed(wire.PathKeys, body, 2)
		proof := *a.Sig
		identity.Sign(newKey, a.Req, &proof)
		a.NewKeySig = identity.EncodeSignature(proof.Sig[:])
		r := fx.step(t, req.Authed(a))
		checkAnswer(t, r, false)
		if k, ok := r.Body.(wire.KeyRotationResponse); ok && k.Reject == nil && string(k.KeyID) != identity.KeyID(newKey.Public().(ed25519.PublicKey)) {
			t.Fatalf("rotated to %s, not the key that proved itself", k.KeyID)
		}
	})
}
