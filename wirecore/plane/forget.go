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

// forget drops a lost worker: its undelivered and unconfirmed commands,
// its execs that never finished (ended at exit code -1 with why), every
// index that names it (its revoked keys too, as Restore would rebuild
// them from its record, which is gone) and its record. Finished execs and
// invocations keep its id, as history. The caller takes it out of
// workerOrder. A lost worker has no parked poll to answer: a poll makes it
// active again (seen).
func (p *Plane) forget(w *worker, now time.Time, why string) operator.WorkerForgotten {
	id := w.ID()
	out := operator.WorkerForgotten{WorkerID: id}
	out.ExecsEnded = p.abandonExecs(p.openExecsOf(w), fmt.Sprintf("worker %s was %s before the exec finished", id, why), now)
	for _, list := range [][]CommandRecord{w.pending, w.unconfirmed} {
		for _, c := range list {
			p.deleteCommand(c.ID)
			out.CommandsDropped++
		}
	}
	p.unsent(w)
	p.setupsDone(w, noSetup)
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

// abandonExecs ends execs whose daemon will never report them (it
// restarted, or their worker was forgotten) with a result at exit code
// ExitWorkerRestarted saying msg, so nobody waits on them forever; it
// returns how many it ended.
func (p *Plane) abandonExecs(exs []*ExecRecord, msg string, now time.Time) int {
	for _, ex := range exs {
		why := msg
		p.finishExec(ex, &wire.ExecResult{ExitCode: ExitWorkerRestarted, Error: &why}, now)
	}
	return len(exs)
}
