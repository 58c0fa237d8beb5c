package plane_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// lastReply is the Reply among a Step's effects.
func lastReply(t *testing.T, eff []plane.Effect) plane.Reply {
	t.Helper()
	for i := len(eff) - 1; i >= 0; i-- {
		if r, ok := eff[i].(plane.Reply); ok {
			return r
		}
	}
	t.Fatalf("no reply in %+v", eff)
	return plane.Reply{}
}

func TestWorkerLimitRefusesNewMachinesOnly(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{3}), MaxWorkers: 2})
	var req plane.RequestID
	hello := func(machine string) plane.Reply {
		t.Helper()
		req++
		return lastReply(t, p.Step(t0, plane.Hello{Auth: bearer, Req: req, Body: helloReq(machine)}))
	}
	for _, m := range []string{"m1", "m2"} {
		if r := hello(m); r.Status != 200 {
			t.Fatalf("hello %s within the limit: %d %+v", m, r.Status, r.Body)
		}
	}
	r := hello("m3")
	body, ok := r.Body.(plane.ErrorBody)
	if r.Status != plane.StatusServiceUnavailable || !ok || body.Error != plane.ErrWorkerLimit ||
		r.RetryAfterS != plane.WorkerLimitRetryAfterS || !strings.Contains(body.Message, "at most 2 workers") {
		t.Fatalf("hello past the limit: %d %+v retry-after %d", r.Status, r.Body, r.RetryAfterS)
	}
	if r := hello("m1"); r.Status != 200 {
		t.Fatalf("a known machine at the limit: %d %+v, want admitted", r.Status, r.Body)
	}
	if n := len(p.Snapshot().Workers); n != 2 {
		t.Fatalf("%d workers registered, want 2", n)
	}
}

func TestDefaultWorkerLimit(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{5})})
	var req plane.RequestID
	for i := range plane.DefaultMaxWorkers {
		req++
		if r := lastReply(t, p.Step(t0, plane.Hello{Auth: bearer, Req: req, Body: helloReq(fmt.Sprintf("m%d", i))})); r.Status != 200 {
			t.Fatalf("hello %d of %d: %d", i+1, plane.DefaultMaxWorkers, r.Status)
		}
	}
	req++
	if r := lastReply(t, p.Step(t0, plane.Hello{Auth: bearer, Req: req, Body: helloReq("one-more")})); r.Status != plane.StatusServiceUnavailable {
		t.Fatalf("hello %d: %d, want 503", plane.DefaultMaxWorkers+1, r.Status)
	}
}

// Each daemon route's limits reach the plane's reply as a 422 naming the
// field, before anything is stored.
func TestRoutesRefuseFieldsPastTheirLimits(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{6})})
	long := strings.Repeat("a", wire.MaxIDBytes+1)
	bad := helloReq(strings.Repeat("m", 900<<10))
	label := helloReq("m1")
	label.Label = "lab\xff"
	cases := []struct {
		name  string
		ev    plane.Event
		field string
	}{
		{"hello of a 900 KB machine_id", plane.Hello{Auth: bearer, Req: 1, Body: bad}, "machine_id"},
		{"hello of an invalid UTF-8 label", plane.Hello{Auth: bearer, Req: 2, Body: label}, "label"},
		{"poll of a long worker id", plane.Poll{Auth: bearer, Req: 3, Body: wire.PollRequest{WorkerID: long + strings.Repeat("w", 27)}}, "worker_id"},
		{"ack of a long invocation id", plane.Ack{Auth: bearer, Req: 4, Body: wire.Ack{InvocationID: long, State: wire.StateSucceeded}}, "invocation_id"},
		{"result of a long exec id", plane.ExecResult{Auth: bearer, Req: 5, ExecID: long}, "exec_id"},
		{"chunk of an exec id with a slash", plane.Chunk{Auth: bearer, Req: 6, ExecID: "a/b", Data: []byte("x")}, "exec_id"},
	}
	for _, c := range cases {
		eff := p.Step(t0, c.ev)
		if len(eff) != 1 {
			t.Errorf("%s: effects %+v, want one reply and nothing stored", c.name, eff)
		}
		r := lastReply(t, eff)
		v, ok := r.Body.(wire.ValidationError)
		if r.Status != plane.StatusUnprocessableEntity || !ok || v.Field != c.field || v.Message == "" {
			t.Errorf("%s: %d %+v, want 422 on %s", c.name, r.Status, r.Body, c.field)
		}
	}
	if n := len(p.Snapshot().Workers); n != 0 {
		t.Errorf("%d workers registered by refused hellos", n)
	}
}

// A poll's timeout_s is a float from the wire: NaN and ±Inf must not
// reach a Duration conversion, whose result the platform decides.
func TestPollWaitOfOddTimeouts(t *testing.T) {
	for _, c := range []struct {
		secs float64
		park bool
	}{{math.NaN(), true}, {math.Inf(1), true}, {1e300, true}, {20, true}, {0.5, true}, {0, false}, {-1, false}, {math.Inf(-1), false}} {
		p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{8})})
		w := *lastReply(t, p.Step(t0, plane.Hello{Auth: bearer, Req: 1, Body: helloReq("m1")})).Body.(wire.HelloResponse).WorkerID
		eff := p.Step(t0, plane.Poll{Auth: bearer, Req: 2, Body: wire.PollRequest{WorkerID: w, TimeoutS: wire.Float(c.secs)}})
		park, parked := eff[len(eff)-1].(plane.Park)
		switch {
		case parked != c.park:
			t.Errorf("timeout_s %v: effects %+v, want parked=%v", c.secs, eff, c.park)
		case parked && (park.Until.Before(t0) || park.Until.After(t0.Add(20*time.Second))):
			t.Errorf("timeout_s %v: parked until %s, want within the 20 s cap", c.secs, park.Until.Sub(t0))
		}
	}
}
