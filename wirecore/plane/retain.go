package plane

import (
	"cmp"
	"slices"
	"time"
)

// finishedRef is one exec or invocation that finished at at. A record
// finished again later (a lost invocation its worker then reports) has a
// later entry too; the earlier one is skipped when its turn comes.
type finishedRef struct {
	exec bool
	id   string
	at   time.Time
}

func (p *Plane) noteFinished(exec bool, id string, at time.Time) {
	if p.cfg.Retain > 0 {
		p.finished = append(p.finished, finishedRef{exec: exec, id: id, at: at})
	}
}

// restoreFinished rebuilds the finished list from restored records.
func (p *Plane) restoreFinished() {
	if p.cfg.Retain <= 0 {
		return
	}
	for id, inv := range p.invocations {
		if isTerminal(inv.State) {
			p.finished = append(p.finished, finishedRef{id: id, at: inv.FinishedAt})
		}
	}
	for id, ex := range p.execs {
		if ex.State == ExecFinished {
			p.finished = append(p.finished, finishedRef{exec: true, id: id, at: ex.FinishedAt})
		}
	}
	slices.SortFunc(p.finished, func(a, b finishedRef) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id))
	})
}

// forgetFinished drops execs and invocations that finished Retain or more
// before now, from memory and (through the batch) from the store.
func (p *Plane) forgetFinished(now time.Time) {
	if p.cfg.Retain <= 0 {
		return
	}
	cutoff := now.Add(-p.cfg.Retain)
	n := 0
	for _, f := range p.finished {
		if f.at.After(cutoff) {
			break
		}
		n++
		if f.exec {
			p.forgetExec(f.id, cutoff)
		} else {
			p.forgetInvocation(f.id, cutoff)
		}
	}
	p.finished = p.finished[n:]
	if forgotten := len(p.invOrder) - len(p.invocations); forgotten > 0 && forgotten >= len(p.invOrder)/2 {
		p.invOrder = slices.DeleteFunc(p.invOrder, func(id string) bool { return p.invocations[id] == nil })
	}
}

func (p *Plane) forgetExec(id string, cutoff time.Time) {
	ex := p.execs[id]
	if ex == nil || ex.State != ExecFinished || ex.FinishedAt.After(cutoff) || len(p.logWaits[id]) > 0 {
		return
	}
	delete(p.execs, id)
	p.batch.deleteExec(id)
}

func (p *Plane) forgetInvocation(id string, cutoff time.Time) {
	inv := p.invocations[id]
	if inv == nil || !isTerminal(inv.State) || inv.FinishedAt.After(cutoff) {
		return
	}
	delete(p.invocations, id)
	delete(p.tails, id)
	p.batch.deleteInvocation(id)
}

func isTerminal(state string) bool {
	switch state {
	case InvocationQueued, InvocationRunning:
		return false
	}
	return true
}
