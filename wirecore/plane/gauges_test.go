package plane_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Gauges count what the plane holds: three workers, one of them lost, one
// poll parked, an exec queued for a worker that is not polling and one
// handed out, a run queued.
func TestGauges(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{7})})
	now := t0
	req := plane.RequestID(0)
	step := func(ev plane.Request) []plane.Effect {
		req++
		return p.Step(now, ev.Named(req))
	}
	script := "true"
	var ids []string
	for _, m := range []string{"g1", "g2", "g3"} {
		eff := step(plane.Hello{Auth: bearer, Body: helloReq(m)})
		ids = append(ids, *eff[len(eff)-1].(plane.Reply).Body.(wire.HelloResponse).WorkerID)
	}
	// g3 goes silent past the lost window while g1 and g2 keep polling.
	now = now.Add(2 * time.Minute)
	step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: ids[0], TimeoutS: 20}}) // parks
	step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: ids[1], TimeoutS: 0}})  // answered at once
	p.Step(now, plane.Tick{})
	step(plane.EnqueueExec{WorkerID: ids[0], Body: operator.ExecRequest{Command: "true"}}) // delivered to the parked poll
	step(plane.EnqueueExec{WorkerID: ids[1], Body: operator.ExecRequest{Command: "true"}}) // queued
	step(plane.EnqueueRun{Body: operator.RunRequest{Queue: "gpu", Script: &script}})

	g := p.Gauges()
	want := plane.Gauges{
		Workers:         map[string]int{plane.WorkerActive: 2, plane.WorkerSettingUp: 0, plane.WorkerHibernating: 0, plane.WorkerLost: 1},
		Parked:          0,
		PendingCommands: 1,
		Execs:           map[string]int{plane.ExecQueued: 1, plane.ExecDelivered: 1, plane.ExecFinished: 0},
		Invocations: map[string]int{plane.InvocationQueued: 1, plane.InvocationRunning: 0,
			plane.InvocationSucceeded: 0, plane.InvocationFailed: 0, plane.InvocationKilled: 0},
	}
	if !gaugesEqual(g, want) {
		t.Errorf("gauges\n%+v\nwant\n%+v", g, want)
	}
	step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: ids[0], TimeoutS: 20}})
	if g := p.Gauges(); g.Parked != 1 {
		t.Errorf("parked %d after a poll with nothing for it, want 1", g.Parked)
	}
}

func gaugesEqual(a, b plane.Gauges) bool {
	eq := func(x, y map[string]int) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if y[k] != v {
				return false
			}
		}
		return true
	}
	return eq(a.Workers, b.Workers) && eq(a.Execs, b.Execs) && eq(a.Invocations, b.Invocations) &&
		a.Parked == b.Parked && a.PendingCommands == b.PendingCommands && a.Unconfirmed == b.Unconfirmed
}
