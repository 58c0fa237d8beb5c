package plane_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

func (h *forgetHarness) run(fn string) string {
	h.t.Helper()
	rep, _ := h.step(plane.EnqueueRun{Body: operator.RunRequest{Function: wire.Function{Module: "jobs", Qualname: fn}}})
	return rep.Body.(operator.Invocation).ID
}

func (h *forgetHarness) invocationState(id string) string {
	h.t.Helper()
	rep, _ := h.step(plane.GetInvocation{InvocationID: id})
	return rep.Body.(operator.Invocation).State
}

// With LostAfter below the poll cap, a run its daemon lists in poll after
// poll, each parked for the whole cap, keeps running: waiting on a parked
// poll is not silence. A run the parked poll does not list still fails
// as unreported once the poll's wait and LostAfter have passed.
func TestParkedPollReportsItsRuns(t *testing.T) {
	const lostAfter = 2 * time.Second
	h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{6}), LostAfter: lostAfter}), now: t0}
	id := h.hello("long-runs")
	kept, dropped := h.run("kept"), h.run("dropped")
	for range 2 { // a poll takes one run
		if rep, _ := h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: id, TimeoutS: 0}}); rep.Status != plane.StatusOK {
			t.Fatalf("poll taking the runs: %d %+v", rep.Status, rep.Body)
		}
	}
	for _, inv := range []string{kept, dropped} {
		if s := h.invocationState(inv); s != plane.InvocationRunning {
			t.Fatalf("invocation %s is %s after its delivery, want running", inv, s)
		}
	}
	listing := []wire.InvocationStatus{{InvocationID: kept, State: wire.StateRunning}}
	end := t0.Add(3 * plane.DefaultPollCap)
	for h.now.Before(end) {
		// A tick answers the poll due at the cap; the daemon polls again.
		if rep, _ := h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: id, TimeoutS: wire.Float(plane.DefaultPollCap.Seconds()), Invocations: listing}}); rep.Status != 0 {
			t.Fatalf("poll at %s answered at once: %d %+v, want it parked", h.now.Sub(t0), rep.Status, rep.Body)
		}
		for range int(plane.DefaultPollCap / time.Second) {
			h.now = h.now.Add(time.Second)
			h.tick()
			if s := h.invocationState(kept); s != plane.InvocationRunning {
				t.Fatalf("at %s the run its parked poll listed is %s, want running", h.now.Sub(t0), s)
			}
		}
	}
	if s := h.invocationState(dropped); s != plane.InvocationFailed {
		t.Errorf("the run no poll listed is %s, want failed as unreported", s)
	}
}
