package plane

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

func (p *Plane) onTick(now time.Time) {
	for _, req := range p.dueParked(now) {
		p.onDeadline(now, req) // a request answered by an earlier one is skipped there
	}
	for _, w := range p.workerOrder {
		if p.isLost(w, now) {
			p.markLost(w, now)
		}
	}
	p.expireUnreported(now)
	p.forgetFinished(now)
	p.forgetLost(now)
}

// CountHealthFrom sets the time before which no worker's silence counts
// against it. Restore sets it to its now: a plane restarted from its
// store excuses the time it was down, when daemons could not poll. A host
// whose restores are not restarts (a serverless handler restores the
// plane on every request) sets it back to when its state began.
func (p *Plane) CountHealthFrom(t time.Time) { p.restoredAt = t }

// isLost: a worker that has not polled for LostAfter is lost. A parked
// poll is a sign of life, a hibernating worker is excused until its wake
// time, and a restart of the plane restarts everyone's window.
func (p *Plane) isLost(w *worker, now time.Time) bool {
	if w.rec.State == WorkerLost || w.hasPoll {
		return false
	}
	since := w.rec.LastSeen
	if p.restoredAt.After(since) {
		since = p.restoredAt
	}
	if w.rec.State == WorkerHibernating && w.rec.HibernateUntil.After(since) {
		since = w.rec.HibernateUntil
	}
	return now.Sub(since) > p.cfg.LostAfter
}

// markLost fails the worker's running invocations; its undelivered
// commands stay queued for when it returns.
func (p *Plane) markLost(w *worker, now time.Time) {
	w.rec.State = WorkerLost
	p.putWorker(w)
	for _, id := range p.runningOf(w.ID()) {
		p.failLost(p.invocations[id], now, fmt.Sprintf("worker %s stopped polling", w.ID()))
	}
}

// expireUnreported fails running invocations whose worker keeps polling
// but has not listed them for LostAfter: the daemon no longer has them.
func (p *Plane) expireUnreported(now time.Time) {
	for _, id := range p.runningIDs() {
		inv := p.invocations[id]
		w := p.workers[inv.WorkerID]
		if w == nil || w.rec.State == WorkerLost {
			continue
		}
		since := p.alive[id]
		if p.restoredAt.After(since) {
			since = p.restoredAt
		}
		if now.Sub(since) > p.cfg.LostAfter {
			p.failLost(inv, now, fmt.Sprintf("worker %s stopped reporting the invocation", w.ID()))
		}
	}
}

func (p *Plane) failLost(inv *InvocationRecord, now time.Time, msg string) {
	inv.State = InvocationFailed
	inv.Error = &wire.ErrorInfo{TypeName: wire.ErrTypeWorkerLost, Message: msg}
	inv.FinishedAt = now
	p.noteFinished(false, inv.ID, now)
	p.clearRunning(inv)
	p.putInvocation(inv)
}

// runningIDs lists running invocations, oldest id first.
func (p *Plane) runningIDs() []string { return slices.Sorted(maps.Keys(p.alive)) }

// runningOf lists worker id's running invocations, oldest id first.
func (p *Plane) runningOf(id string) []string { return slices.Sorted(maps.Keys(p.runningOn[id])) }

// setRunning records inv, running on its worker, as alive at now.
func (p *Plane) setRunning(inv *InvocationRecord, now time.Time) {
	p.alive[inv.ID] = now
	on := p.runningOn[inv.WorkerID]
	if on == nil {
		on = make(map[string]struct{})
		p.runningOn[inv.WorkerID] = on
	}
	on[inv.ID] = struct{}{}
}

// clearRunning forgets inv as running; call it before inv's worker id
// changes.
func (p *Plane) clearRunning(inv *InvocationRecord) {
	delete(p.alive, inv.ID)
	if on := p.runningOn[inv.WorkerID]; on != nil {
		delete(on, inv.ID)
		if len(on) == 0 {
			delete(p.runningOn, inv.WorkerID)
		}
	}
}
