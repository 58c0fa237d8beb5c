package plane_test

import (
	"math"
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
	if n := h.p.PendingCommands(); n != 0 {
		t.Errorf("PendingCommands %d; want 0", n)
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

// forgotten reports whether the plane no longer has worker id.
func (h *forgetHarness) forgotten(id string) bool {
	h.t.Helper()
	rep, _ := h.step(plane.GetWorker{WorkerID: id})
	return rep.Status == plane.StatusNotFound
}

// A worker that hibernated for longer than ForgetLostAfter becomes lost
// LostAfter past its wake time and is forgotten ForgetLostAfter after
// that, not in the Tick that marks it lost (counting from its last poll
// would), with the command queued for its return still there meanwhile.
func TestForgetLostAfterHibernation(t *testing.T) {
	h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{4}), ForgetLostAfter: time.Hour}), now: t0}
	id := h.hello("sleeper")
	wake := t0.Add(3 * time.Hour)
	if rep, _ := h.step(plane.EnqueueHibernate{WorkerID: id, Body: operator.HibernateRequest{UntilEpochS: float64(wake.Unix())}}); rep.Status/100 != 2 {
		t.Fatalf("hibernate: %d %+v", rep.Status, rep.Body)
	}
	if rep, _ := h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: id, TimeoutS: 0}}); rep.Status != plane.StatusOK {
		t.Fatalf("poll taking the hibernate: %d %+v", rep.Status, rep.Body)
	}
	h.step(plane.EnqueueExec{WorkerID: id, Body: operator.ExecRequest{Command: "true"}})

	h.now = wake.Add(plane.DefaultLostAfter + time.Second)
	h.tick()
	if h.forgotten(id) {
		t.Fatalf("forgotten in the Tick that marked it lost, %s after its wake time", plane.DefaultLostAfter+time.Second)
	}
	if g := h.p.Gauges(); g.Workers[plane.WorkerLost] != 1 || g.PendingCommands != 1 {
		t.Fatalf("after waking late: workers %+v, %d commands pending; want it lost with its exec queued", g.Workers, g.PendingCommands)
	}
	h.now = wake.Add(plane.DefaultLostAfter + time.Hour - time.Second)
	h.tick()
	if h.forgotten(id) {
		t.Fatalf("forgotten before it was lost for ForgetLostAfter")
	}
	h.now = wake.Add(plane.DefaultLostAfter + time.Hour)
	if batch := h.tick(); batch == nil || !slices.Equal(batch.DeleteWorkers, []string{id}) {
		t.Fatalf("tick batch %+v, want %s deleted once lost for an hour", batch, id)
	}
}

// A plane restored after an outage longer than ForgetLostAfter excuses
// the outage, as for losing a worker: the Tick that marks the fleet lost
// does not forget it too.
func TestForgetLostAfterRestart(t *testing.T) {
	cfg := func() plane.Config {
		return plane.Config{Entropy: rand.NewChaCha8([32]byte{5}), ForgetLostAfter: time.Hour}
	}
	h := &forgetHarness{t: t, p: plane.New(cfg()), now: t0}
	id := h.hello("survivor")
	h.step(plane.EnqueueExec{WorkerID: id, Body: operator.ExecRequest{Command: "true"}})

	up := t0.Add(5 * time.Hour)
	p, err := plane.Restore(cfg(), h.p.Snapshot(), up)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	h.p, h.now = p, up.Add(plane.DefaultLostAfter+time.Second)
	h.tick()
	if h.forgotten(id) {
		t.Fatalf("forgotten in the first Tick after a 5 h outage that marked it lost")
	}
	if g := h.p.Gauges(); g.Workers[plane.WorkerLost] != 1 || g.PendingCommands != 1 {
		t.Fatalf("after the restart: workers %+v, %d commands pending; want it lost with its exec queued", g.Workers, g.PendingCommands)
	}
	h.now = up.Add(plane.DefaultLostAfter + time.Hour)
	if batch := h.tick(); batch == nil || !slices.Equal(batch.DeleteWorkers, []string{id}) {
		t.Fatalf("tick batch %+v, want %s deleted once lost for an hour", batch, id)
	}
}

// Once a worker is forgotten, nobody acts for it: a bearer ack of the run
// it was lost with, or a result or log chunk for its exec, is refused 404
// unknown_worker rather than taken as from a worker without a key, and
// changes nothing.
func TestForgottenWorkerIsActedForByNobody(t *testing.T) {
	h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{7})}), now: t0}
	gone := h.hello("gone")
	inv := h.run("job")
	h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: gone, TimeoutS: 0}})
	acc, _ := h.step(plane.EnqueueExec{WorkerID: gone, Body: operator.ExecRequest{Command: "sleep 600"}})
	execID := acc.Body.(operator.ExecAccepted).ExecID
	h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: gone, TimeoutS: 0}})
	h.now = h.now.Add(2 * time.Minute)
	h.tick() // lost: its run fails as WorkerLost, which its own ack would overturn
	if rep, _ := h.step(plane.ForgetWorker{WorkerID: gone}); rep.Status != plane.StatusOK {
		t.Fatalf("forget: %d %+v", rep.Status, rep.Body)
	}
	exec := func() *wire.ExecResult {
		rep, _ := h.step(plane.GetExec{ExecID: execID})
		return rep.Body.(operator.ExecStatus).Result
	}
	before := exec()

	for _, c := range []struct {
		what string
		ev   plane.Request
	}{
		{"ack of its run", plane.Ack{Auth: bearer, Body: wire.Ack{InvocationID: inv, State: wire.StateSucceeded}}},
		{"ack of its run naming it", plane.Ack{Auth: bearer, Body: wire.Ack{InvocationID: inv, State: wire.StateSucceeded, WorkerID: gone}}},
		{"result of its exec", plane.ExecResult{Auth: bearer, ExecID: execID, Body: wire.ExecResult{ExitCode: 0}}},
		{"chunk of its exec", plane.Chunk{Auth: bearer, ExecID: execID, Data: []byte("late")}},
	} {
		rep, batch := h.step(c.ev)
		body, _ := rep.Body.(plane.ErrorBody)
		if rep.Status != plane.StatusNotFound || body.Error != plane.ErrUnknownWorker {
			t.Errorf("%s: %d %+v, want 404 %s", c.what, rep.Status, rep.Body, plane.ErrUnknownWorker)
		}
		if batch != nil {
			t.Errorf("%s wrote %+v", c.what, batch)
		}
	}
	if s := h.invocationState(inv); s != plane.InvocationFailed {
		t.Errorf("its run is %s after the refused acks, want still failed", s)
	}
	if after := exec(); after == nil || before == nil || after.ExitCode != before.ExitCode {
		t.Errorf("its exec's result %+v, was %+v", after, before)
	}
}

// A forgotten worker's last poll reply cannot be taken back: an
// Undelivered for it changes nothing and answers nothing (taking back
// its setup would store its record again), and the reply a live worker
// got is still taken back after it.
func TestUndeliveredAfterForgetChangesNothing(t *testing.T) {
	h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{9})}), now: t0}
	gone, stays := h.hello("gone"), h.hello("stays")
	h.step(plane.EnqueueSetup{WorkerID: gone, Body: operator.SetupRequest{Script: "true"}})
	h.step(plane.EnqueueExec{WorkerID: stays, Body: operator.ExecRequest{Command: "true"}})
	rep, _ := h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: gone}})
	if len(rep.Body.(wire.PollResponse).Commands) != 1 {
		t.Fatalf("gone's poll: %+v", rep.Body)
	}
	goneReply, goneSetup := h.req, rep.Body.(wire.PollResponse).Commands[0].ID
	if rep, _ := h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: stays}}); len(rep.Body.(wire.PollResponse).Commands) != 1 {
		t.Fatalf("stays' poll: %+v", rep.Body)
	}
	staysReply := h.req

	h.now = h.now.Add(2 * time.Minute)
	h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: stays, TimeoutS: 0}})
	h.tick()
	if rep, _ := h.step(plane.ForgetWorker{WorkerID: gone}); rep.Status != plane.StatusOK {
		t.Fatalf("forgetting gone: %d %+v", rep.Status, rep.Body)
	}
	if effs := h.p.Step(h.now, plane.Undelivered{Req: goneReply}); len(effs) != 0 {
		t.Errorf("Undelivered of a forgotten worker's reply: %+v, want no effects", effs)
	}
	if got := h.p.PendingCommands(); got != 0 {
		t.Errorf("%d commands pending after the forgotten worker's Undelivered, want 0", got)
	}
	// Nor does a late ack of its setup store its record again.
	if rep, batch := h.step(plane.Ack{Auth: bearer, Body: wire.Ack{InvocationID: "setup-" + goneSetup, State: wire.StateSucceeded}}); rep.Status != plane.StatusOK || batch != nil {
		t.Errorf("ack of a forgotten worker's setup: %d, stored %+v", rep.Status, batch)
	}
	// stays polled (empty) since its reply with the exec: that empty
	// reply carried nothing, so the exec's reply is still the one to take
	// back.
	effs := h.p.Step(h.now, plane.Undelivered{Req: staysReply})
	if !slices.ContainsFunc(effs, func(e plane.Effect) bool { _, ok := e.(plane.Persist); return ok }) {
		t.Errorf("Undelivered of a live worker's reply: %+v, want its exec put back", effs)
	}
	if got := h.p.PendingCommands(); got != 1 {
		t.Errorf("%d commands pending after the live worker's Undelivered, want 1", got)
	}
}

// A logs wait too long for a Duration, infinite or NaN parks for
// MaxLogWait, as a poll parks for the poll cap; before, it overflowed and
// was answered at once.
func TestLogsWaitIsCapped(t *testing.T) {
	for _, secs := range []float64{2, 1e11, math.Inf(1), math.NaN()} {
		h := &forgetHarness{t: t, p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{2})}), now: t0}
		w := h.hello("m1")
		acc, _ := h.step(plane.EnqueueExec{WorkerID: w, Body: operator.ExecRequest{Command: "true"}})
		h.step(plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: w}}) // delivered: not finished
		h.req++
		var park *plane.Park
		for _, eff := range h.p.Step(h.now, plane.WaitLogs{Req: h.req, ExecID: acc.Body.(operator.ExecAccepted).ExecID, WaitS: secs}) {
			if p, ok := eff.(plane.Park); ok {
				park = &p
			}
		}
		want := 2 * time.Second
		if secs != 2 {
			want = plane.MaxLogWait
		}
		if park == nil || park.Until.Sub(h.now) != want {
			t.Errorf("wait_s %v: park %+v, want one for %v", secs, park, want)
		}
	}
}
