package plane_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// forgetHarness steps a plane with requests numbered in turn.
type forgetHarness struct {
	t   *testing.T
	p   *plane.Plane
	now time.Time
	req plane.RequestID
}

func (h *forgetHarness) step(ev plane.Request) (plane.Reply, *plane.Batch) {
	h.t.Helper()
	h.req++
	var rep plane.Reply
	var batch *plane.Batch
	for _, eff := range h.p.Step(h.now, ev.Named(h.req)) {
		switch e := eff.(type) {
		case plane.Reply:
			rep = e
		case plane.Persist:
			b := e.Batch
			batch = &b
		}
	}
	return rep, batch
}

func (h *forgetHarness) hello(machine string) string {
	h.t.Helper()
	rep, _ := h.step(plane.Hello{Auth: bearer, Body: helloReq(machine)})
	return *rep.Body.(wire.HelloResponse).WorkerID
}

func (h *forgetHarness) tick() *plane.Batch {
	var batch *plane.Batch
	for _, eff := range h.p.Step(h.now, plane.Tick{}) {
		if e, ok := eff.(plane.Persist); ok {
			b := e.Batch
			batch = &b
		}
	}
	return batch
}

// An operator forgets a lost worker: its commands and record leave the
// store in one batch, its unfinished exec ends at -1 saying why, the
// restored plane no longer has it, and its machine's next hello is a new
// worker. An active worker and an unknown one are refused.
func TestForgetWorker(t *testing.T) {
	h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{9})}), now: t0}
	gone, stays := h.hello("gone"), h.hello("stays")
	acc, _ := h.step(plane.EnqueueExec{WorkerID: gone, Body: operator.ExecRequest{Command: "true"}})
	execID := acc.Body.(operator.ExecAccepted).ExecID

	if rep, _ := h.step(plane.ForgetWorker{WorkerID: gone}); rep.Status != plane.StatusConflict {
		t.Fatalf("forgetting an active worker: %d %+v", rep.Status, rep.Body)
	}
	if rep, _ := h.step(plane.ForgetWorker{WorkerID: "no-such"}); rep.Status != plane.StatusNotFound {
		t.Fatalf("forgetting an unknown worker: %d %+v", rep.Status, rep.Body)
	}

	h.now = h.now.Add(2 * time.Minute)
	h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: stays, TimeoutS: 0}})
	h.tick() // gone is lost now
	rep, batch := h.step(plane.ForgetWorker{WorkerID: gone})
	if rep.Status != plane.StatusOK {
		t.Fatalf("forgetting a lost worker: %d %+v", rep.Status, rep.Body)
	}
	if got := rep.Body.(operator.WorkerForgotten); got != (operator.WorkerForgotten{WorkerID: gone, CommandsDropped: 1, ExecsEnded: 1}) {
		t.Errorf("answer %+v", got)
	}
	if batch == nil || !slices.Equal(batch.DeleteWorkers, []string{gone}) || len(batch.DeleteCommands) != 1 || len(batch.Execs) != 1 {
		t.Fatalf("batch %+v", batch)
	}
	if ex := batch.Execs[0]; ex.ExecID != execID || ex.State != plane.ExecFinished || ex.Result.ExitCode != wire.ExitSpawnFailed || ex.Result.Error == nil {
		t.Errorf("the forgotten worker's exec: %+v", ex)
	}

	snap := h.p.Snapshot()
	if len(snap.Workers) != 1 || snap.Workers[0].ID != stays || len(snap.Commands) != 0 {
		t.Fatalf("snapshot after forgetting: workers %+v commands %+v", snap.Workers, snap.Commands)
	}
	if _, err := plane.Restore(plane.Config{Entropy: rand.NewChaCha8([32]byte{9})}, snap, h.now); err != nil {
		t.Fatalf("restore after forgetting: %v", err)
	}
	if rep, _ := h.step(plane.GetWorker{WorkerID: gone}); rep.Status != plane.StatusNotFound {
		t.Errorf("the forgotten worker is still shown: %d", rep.Status)
	}
	if rep, _ := h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: gone, TimeoutS: 0}}); rep.Status != plane.StatusNotFound {
		t.Errorf("a poll of the forgotten worker: %d, want 404 (its daemon says hello again)", rep.Status)
	}
	if kept, walked := h.p.PendingCommands(), h.p.Gauges().PendingCommands; kept != walked || kept != 0 {
		t.Errorf("PendingCommands %d, workers hold %d; want 0", kept, walked)
	}
	if again := h.hello("gone"); again == gone {
		t.Errorf("the machine's next hello got its forgotten id %s back", again)
	}
}

// With ForgetLostAfter, a Tick forgets a worker lost for that long, and
// only that one.
func TestForgetLostAfter(t *testing.T) {
	h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{3}), ForgetLostAfter: time.Hour}), now: t0}
	old := h.hello("old")
	h.now = h.now.Add(30 * time.Minute)
	recent := h.hello("recent")
	h.now = h.now.Add(35 * time.Minute) // old: 65 min unseen; recent: 35 min
	batch := h.tick()
	if batch == nil || !slices.Equal(batch.DeleteWorkers, []string{old}) {
		t.Fatalf("tick batch %+v, want %s deleted", batch, old)
	}
	g := h.p.Gauges()
	if g.Workers[plane.WorkerLost] != 1 || g.Workers[plane.WorkerActive] != 0 {
		t.Errorf("workers after the tick: %+v (only %s should remain, lost)", g.Workers, recent)
	}
}
