package plane

import (
	"cmp"
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
	p.reply(e.Req, StatusOK, p.forget(w, now, "forgotten by an operator"))
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
	for _, w := range stale {
		p.forget(w, now, fmt.Sprintf("lost for %s", p.cfg.ForgetLostAfter))
	}
}

// forget drops a lost worker: its undelivered and unconfirmed commands,
// its execs that never finished (ended at exit code -1 with why), every
// index that names it, and its record. Finished execs and invocations
// keep its id, as history.
func (p *Plane) forget(w *worker, now time.Time, why string) operator.WorkerForgotten {
	id := w.ID()
	out := operator.WorkerForgotten{WorkerID: id}
	for _, list := range [][]CommandRecord{w.pending, w.unconfirmed} {
		for _, c := range list {
			p.deleteCommand(c.ID)
			out.CommandsDropped++
		}
	}
	msg := fmt.Sprintf("worker %s was %s before the exec finished", id, why)
	for _, ex := range p.execsOf(id) {
		p.finishExec(ex, &wire.ExecResult{ExitCode: wire.ExitSpawnFailed, Error: &msg}, now)
		out.ExecsEnded++
	}
	delete(p.workers, id)
	p.workerOrder = slices.DeleteFunc(p.workerOrder, func(o *worker) bool { return o == w })
	if p.byMachine[w.rec.MachineID] == id {
		delete(p.byMachine, w.rec.MachineID)
	}
	for _, k := range []string{w.rec.KeyID, w.rec.PrevKeyID} {
		if k != "" && p.byKey[k] == id {
			delete(p.byKey, k)
		}
	}
	p.batch.deleteWorker(id)
	return out
}

// execsOf lists worker id's execs that have not finished, oldest first.
func (p *Plane) execsOf(id string) []*ExecRecord {
	var out []*ExecRecord
	for _, ex := range p.execs {
		if ex.WorkerID == id && ex.State != ExecFinished {
			out = append(out, ex)
		}
	}
	slices.SortFunc(out, func(a, b *ExecRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ExecID, b.ExecID)
	})
	return out
}
