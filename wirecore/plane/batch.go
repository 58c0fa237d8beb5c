package plane

import "slices"

// The put helpers keep one entry per record in the step's batch, holding
// its latest state, so a store never has to care about order within a
// batch.

func (p *Plane) putWorker(w *worker) {
	r := cloneWorker(w.rec)
	w.persistedSeen = r.LastSeen
	for i := range p.batch.Workers {
		if p.batch.Workers[i].ID == r.ID {
			p.batch.Workers[i] = r
			return
		}
	}
	p.batch.Workers = append(p.batch.Workers, r)
}

func (p *Plane) putCommand(c CommandRecord) {
	p.batch.Commands = append(p.batch.Commands, c)
}

// deleteCommand drops a delivered command. One created in this same step
// never reaches the store at all.
func (p *Plane) deleteCommand(id string) {
	if i := slices.IndexFunc(p.batch.Commands, func(c CommandRecord) bool { return c.ID == id }); i >= 0 {
		p.batch.Commands = slices.Delete(p.batch.Commands, i, i+1)
		return
	}
	p.batch.DeleteCommands = append(p.batch.DeleteCommands, id)
}

func (p *Plane) putInvocation(r *InvocationRecord) {
	for i := range p.batch.Invocations {
		if p.batch.Invocations[i].ID == r.ID {
			p.batch.Invocations[i] = *r
			return
		}
	}
	p.batch.Invocations = append(p.batch.Invocations, *r)
}

func (p *Plane) putExec(r *ExecRecord) {
	for i := range p.batch.Execs {
		if p.batch.Execs[i].ExecID == r.ExecID {
			p.batch.Execs[i] = *r
			return
		}
	}
	p.batch.Execs = append(p.batch.Execs, *r)
}
