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
	forgot := false
	for _, w := range p.workerOrder {
		if p.isLost(w, now) {
			p.markLost(w, now)
		}
		if p.forgetDue(w, now) {
			p.forget(w, now, fmt.Sprintf("lost for %s", p.cfg.ForgetLostAfter))
			forgot = true
		}
	}
	if forgot {
		// One pass over the order for them all, after the loop over it.
		p.workerOrder = slices.DeleteFunc(p.workerOrder, func(o *worker) bool { return p.workers[o.ID()] != o })
	}
	p.expireUnreported(now)
	p.forgetFinished(now)
}

// CountHealthFrom sets the time before which no worker's silence counts
// against it. Restore sets it to its now: a plane restarted from its
// store excuses the time it was down, when daemons could not poll. A host
// whose restores are not restarts (a serverless handler restores the
// plane on every request) sets it back to when its state began.
func (p *Plane) CountHealthFrom(t time.Time) { p.restoredAt = t }

// isLost: a worker silent for LostAfter (silentSince) is lost. A parked
// poll is a sign of life.
func (p *Plane) isLost(w *worker, now time.Time) bool {
	if w.rec.State == WorkerLost || w.hasPoll {
		return false
	}
	return now.Sub(p.silentSince(w)) > p.cfg.LostAfter && !p.busy(w)
}

// busy reports whether w's daemon has every permit taken (its running
// runs and open execs fill its max_invocations) and, without the cancel
// extension, has therefore stopped polling: "When no permit is free the
// daemon stops long-polling entirely and waits for one" (spec 001). Its
// silence is then no sign of its death, nor is its not listing its runs
// (it lists them only in polls); it is counted again from when one of
// them ends (freedAt). A daemon that speaks the extension polls while
// full, for control commands only, and is never busy.
func (p *Plane) busy(w *worker) bool {
	limit := int(w.rec.Capabilities.MaxInvocations)
	return limit > 0 && !w.uses(wire.ExtCancel) && len(w.openExecs)+len(p.runningOn[w.ID()]) >= limit
}

// ended records that a run or exec of w ended by its daemon's word;
// wasBusy is busy(w) before it did.
func (p *Plane) ended(w *worker, wasBusy bool, now time.Time) {
	if w != nil && wasBusy {
		w.freedAt = now
	}
}

// forgetDue: with ForgetLostAfter, a lost worker is forgotten that long
// after it became lost, counted from silentSince as isLost counts, so
// whatever excused its silence there (a hibernation, the plane's own
// restart) delays its forgetting as much. One Tick marks a worker lost
// and forgets it only when it comes ForgetLostAfter late or more (a
// serverless host ticks on its next request only).
func (p *Plane) forgetDue(w *worker, now time.Time) bool {
	return p.cfg.ForgetLostAfter > 0 && w.rec.State == WorkerLost &&
		now.Sub(p.silentSince(w)) >= p.cfg.LostAfter+p.cfg.ForgetLostAfter
}

// silentSince is when w's silence starts to count: its last poll, or when
// its last parked poll was answered (its until, moved to the answer by
// unpark): its daemon was waiting on the plane until then, and were
// silence counted from the poll's arrival, a LostAfter below PollCap would
// lose the worker in the Tick that answers its poll at the deadline,
// before the daemon can poll again. But not before the plane was restored (a
// restart restarts everyone's window: daemons could not poll a plane that
// was down) nor before the wake time of its hibernation. markLost keeps
// HibernateUntil (only a poll or hello clears it), so a worker lost after
// hibernating still counts from there.
func (p *Plane) silentSince(w *worker) time.Time {
	since := w.rec.LastSeen
	if w.park.kind == parkPoll && w.park.until.After(since) {
		since = w.park.until
	}
	if p.restoredAt.After(since) {
		since = p.restoredAt
	}
	if w.rec.HibernateUntil.After(since) {
		since = w.rec.HibernateUntil
	}
	if w.freedAt.After(since) {
		since = w.freedAt
	}
	return since
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
// An invocation listed by the worker's last parked poll counts as reported
// until that poll was answered (its until, which unpark moves to the
// answer): its daemon cannot list it again before the plane answers the
// poll, which may be PollCap later, and a LostAfter below PollCap is a
// valid setting (it only makes a daemon that stops polling lost sooner),
// so waiting on the plane's own answer is not silence.
func (p *Plane) expireUnreported(now time.Time) {
	for _, id := range p.dueUnreported(now) {
		inv := p.invocations[id]
		p.failLost(inv, now, fmt.Sprintf("worker %s stopped reporting the invocation", inv.WorkerID))
	}
}

// dueUnreported lists, sorted (the order their failures are stored in),
// the running invocations unreported for LostAfter at now. It looks only
// at those whose stamp came up (see Plane.stamps).
func (p *Plane) dueUnreported(now time.Time) []string {
	for len(p.stamps) > 0 && now.Sub(p.stamps[0].at) > p.cfg.LostAfter {
		s := p.stamps.pop()
		switch at, ok := p.alive[s.id]; {
		case !ok: // it ended
		case at.Equal(s.at):
			p.unreported[s.id] = struct{}{}
		default:
			p.stamps.push(stamp{at: at, id: s.id})
		}
	}
	var due []string
	for id := range p.unreported {
		since := p.alive[id]
		if now.Sub(since) <= p.cfg.LostAfter {
			delete(p.unreported, id) // reported again
			p.stamps.push(stamp{at: since, id: id})
			continue
		}
		if p.silent(id, since, now) {
			due = append(due, id)
		}
	}
	slices.Sort(due)
	return due
}

// silent reports whether running invocation id, last reported at since,
// counts as unreported for LostAfter at now (see expireUnreported).
func (p *Plane) silent(id string, since, now time.Time) bool {
	w := p.workers[p.invocations[id].WorkerID]
	if w == nil || w.rec.State == WorkerLost || p.busy(w) {
		return false
	}
	if pk := &w.park; pk.kind == parkPoll && since.Equal(pk.at) && pk.until.After(since) {
		// reported stamped it with that poll's arrival. Never earlier:
		// a clock that stepped back can answer a poll before it came.
		since = pk.until
	}
	if p.restoredAt.After(since) {
		since = p.restoredAt
	}
	if w.freedAt.After(since) {
		since = w.freedAt // it was busy until then: it could not list it
	}
	return now.Sub(since) > p.cfg.LostAfter
}

// stamp is an alive time of a running invocation (Plane.stamps).
type stamp struct {
	at time.Time
	id string
}

func (s stamp) before(o stamp) bool { return s.at.Before(o.at) }

func (p *Plane) failLost(inv *InvocationRecord, now time.Time, msg string) {
	inv.State = InvocationFailed
	inv.Error = &wire.ErrorInfo{TypeName: wire.ErrTypeWorkerLost, Message: msg}
	inv.FinishedAt = now
	p.noteFinished(false, inv.ID, now)
	p.clearRunning(inv)
	p.putInvocation(inv)
}

// runningOf lists worker id's running invocations, oldest id first.
func (p *Plane) runningOf(id string) []string { return slices.Sorted(maps.Keys(p.runningOn[id])) }

// setRunning records inv, running on its worker, as alive at now.
func (p *Plane) setRunning(inv *InvocationRecord, now time.Time) {
	p.alive[inv.ID] = now
	p.stamps.push(stamp{at: now, id: inv.ID})
	on := p.runningOn[inv.WorkerID]
	if on == nil {
		on = make(map[string]struct{})
		p.runningOn[inv.WorkerID] = on
	}
	on[inv.ID] = struct{}{}
}

// reported records that running invocation id was listed by its worker
// at now. A clock that stepped back gives a time earlier than any of its
// stamps: it gets one of its own.
func (p *Plane) reported(id string, now time.Time) {
	if now.Before(p.alive[id]) {
		p.stamps.push(stamp{at: now, id: id})
	}
	p.alive[id] = now
}

// clearRunning forgets inv as running; call it before inv's worker id
// changes.
func (p *Plane) clearRunning(inv *InvocationRecord) {
	delete(p.alive, inv.ID)
	delete(p.unreported, inv.ID)
	if on := p.runningOn[inv.WorkerID]; on != nil {
		delete(on, inv.ID)
		if len(on) == 0 {
			delete(p.runningOn, inv.WorkerID)
		}
	}
}
