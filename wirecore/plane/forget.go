package plane

import (
	"fmt"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

func (p *Plane) onForgetWorker(now time.Time, e ForgetWorker) {
	w := p.target(e.Req, e.WorkerID)
	if w == nil {
		return
	}
	if w.rec.State != WorkerLost {
		p.opError(e.Req, StatusConflict, "worker %s is %s, not lost: only a worker that stopped polling is forgotten", w.ID(), w.rec.State)
		return
	}
	out := p.forget(w, now, "forgotten by an operator")
	p.workerOrder = slices.DeleteFunc(p.workerOrder, func(o *worker) bool { return o == w })
	p.reply(e.Req, StatusOK, out)
}

// forgetLost forgets the workers lost for ForgetLostAfter (Tick).
func (p *Plane) forgetLost(now time.Time) {
	if p.cfg.ForgetLostAfter <= 0 {
		return
	}
	var stale []*worker
	for _, w := range p.workerOrder {
		if w.rec.State == WorkerLost && now.Sub(w.rec.LastSeen) >= p.cfg.ForgetLostAfter {
			stale = append(stale, w)
		}
	}
	if len(stale) == 0 {
		return
	}
	why := fmt.Sprintf("lost for %s", p.cfg.ForgetLostAfter)
	for _, w := range stale {
		p.forget(w, now, why)
	}
	// One pass over the order for them all.
	p.workerOrder = slices.DeleteFunc(p.workerOrder, func(o *worker) bool { return p.workers[o.ID()] != o })
}

// forget drops a lost worker: its undelivered and unconfirmed commands,
// its execs that never finished (ended at exit code -1 with why), every
// index that names it (its revoked keys too, as Restore would rebuild
// them from its record, which is gone) and its record. Finished execs and
// invocations keep its id, as history. The caller takes it out of
// workerOrder.
func (p *Plane) forget(w *worker, now time.Time, why string) operator.WorkerForgotten {
	id := w.ID()
	if w.hasPoll { // a lost worker has none; kept true to the rule anyway
		p.unpark(w.poll)
	}
	out := operator.WorkerForgotten{WorkerID: id}
	msg := fmt.Sprintf("worker %s was %s before the exec finished", id, why)
	for _, ex := range p.openExecsOf(w) {
		p.finishExec(ex, &wire.ExecResult{ExitCode: wire.ExitSpawnFailed, Error: &msg}, now)
		out.ExecsEnded++
	}
	for _, list := range [][]CommandRecord{w.pending, w.unconfirmed} {
		for _, c := range list {
			p.deleteCommand(c.ID)
			out.CommandsDropped++
		}
	}
	p.pendingTotal -= len(w.pending)
	delete(p.workers, id)
	if p.byMachine[w.rec.MachineID] == id {
		delete(p.byMachine, w.rec.MachineID)
	}
	for _, k := range []string{w.rec.KeyID, w.rec.PrevKeyID} {
		if k != "" && p.byKey[k] == id {
			delete(p.byKey, k)
		}
	}
	for _, k := range w.rec.RevokedKeyIDs {
		if p.revoked[k] == id {
			delete(p.revoked, k)
		}
	}
	p.batch.deleteWorker(id)
	return out
}

// openExecsOf lists w's execs that have not finished, by id: the ones
// delivered (openExecs) and the ones still queued as its commands.
func (p *Plane) openExecsOf(w *worker) []*ExecRecord {
	var ids []string
	for id := range w.openExecs {
		ids = append(ids, id)
	}
	for _, list := range [][]CommandRecord{w.pending, w.unconfirmed} {
		for _, c := range list {
			if c.Kind == wire.KindExec {
				ids = append(ids, c.ExecID)
			}
		}
	}
	slices.Sort(ids)
	var out []*ExecRecord
	for _, id := range slices.Compact(ids) {
		if ex := p.execs[id]; ex != nil && ex.State != ExecFinished {
			out = append(out, ex)
		}
	}
	return out
}
