package plane_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// A daemon with every permit taken stops polling (spec 001: "When no
// permit is free the daemon stops long-polling entirely and waits for
// one"). Its silence is not its death: its run is not failed and it is
// not lost however long the run takes; its silence counts from when the
// run ends. A daemon with a permit free, or one that speaks the cancel
// extension (it polls while full), is lost as before.
func TestBusyWorkerIsNotLost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max       int
		exts      []string
		wantAlive bool
	}{
		{"every permit taken", 1, nil, true},
		{"a permit free", 2, nil, false},
		{"full, speaking cancel", 1, []string{wire.ExtCancel}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{5})}), now: t0}
			body := helloReq("m1")
			body.Capabilities.MaxInvocations = wire.Int(tc.max)
			body.Extensions = tc.exts
			rep, _ := h.step(plane.Hello{Auth: bearer, Body: body})
			w := *rep.Body.(wire.HelloResponse).WorkerID
			acc, _ := h.step(plane.EnqueueRun{Body: operator.RunRequest{Function: wire.Function{Module: "m", Qualname: "f"}}})
			inv := acc.Body.(operator.Invocation).ID
			if rep, _ := h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: w}}); len(rep.Body.(wire.PollResponse).Commands) != 1 {
				t.Fatalf("the poll did not take the run: %+v", rep.Body)
			}
			for range 30 { // ten minutes of ticks with no poll
				h.now = h.now.Add(20 * time.Second)
				h.tick()
			}
			state := workerState(t, h, w)
			if alive := state != plane.WorkerLost; alive != tc.wantAlive {
				t.Fatalf("worker %s after ten silent minutes, want alive=%v", state, tc.wantAlive)
			}
			if !tc.wantAlive {
				return
			}
			if st := invocationState(t, h, inv); st != plane.InvocationRunning {
				t.Fatalf("its run is %s, want running", st)
			}
			// The run ends: from then on its silence counts.
			h.step(plane.Ack{Auth: bearer, Body: wire.Ack{InvocationID: inv, State: wire.StateSucceeded, WorkerID: w}})
			h.now = h.now.Add(plane.DefaultLostAfter)
			h.tick()
			if st := workerState(t, h, w); st == plane.WorkerLost {
				t.Fatalf("lost within LostAfter of its run's end")
			}
			h.now = h.now.Add(time.Second)
			h.tick()
			if st := workerState(t, h, w); st != plane.WorkerLost {
				t.Fatalf("worker %s after LostAfter without a poll since its run ended, want lost", st)
			}
		})
	}
}

func workerState(t *testing.T, h *forgetHarness, id string) string {
	t.Helper()
	rep, _ := h.step(plane.GetWorker{WorkerID: id})
	w, ok := rep.Body.(operator.Worker)
	if !ok {
		t.Fatalf("get worker %s: %d %+v", id, rep.Status, rep.Body)
	}
	return w.State
}

func invocationState(t *testing.T, h *forgetHarness, id string) string {
	t.Helper()
	rep, _ := h.step(plane.GetInvocation{InvocationID: id})
	inv, ok := rep.Body.(operator.Invocation)
	if !ok {
		t.Fatalf("get invocation %s: %d %s", id, rep.Status, fmt.Sprint(rep.Body))
	}
	return inv.State
}
