package plane

// Gauges are the plane's state in a few counts, as a metrics page shows
// them. Counting walks every worker and exec: a scrape's cost, not a
// poll's.
type Gauges struct {
	// Workers by state (WorkerActive, WorkerSettingUp, WorkerHibernating,
	// WorkerLost).
	Workers map[string]int
	// Parked counts the requests held open: polls and log waits.
	Parked int
	// PendingCommands are commands queued for their worker, not handed
	// out yet; Unconfirmed those handed out under a cursor whose daemon
	// has not confirmed them.
	PendingCommands, Unconfirmed int
	// Execs and Invocations by state, finished ones the plane still
	// retains included.
	Execs, Invocations map[string]int
}

// Gauges counts what the plane holds now.
func (p *Plane) Gauges() Gauges {
	g := Gauges{
		Workers:     map[string]int{WorkerActive: 0, WorkerSettingUp: 0, WorkerHibernating: 0, WorkerLost: 0},
		Parked:      len(p.parked),
		Execs:       map[string]int{ExecQueued: 0, ExecDelivered: 0, ExecFinished: 0},
		Invocations: map[string]int{InvocationQueued: 0, InvocationRunning: 0, InvocationSucceeded: 0, InvocationFailed: 0, InvocationKilled: 0},
	}
	for _, w := range p.workerOrder {
		g.Workers[w.rec.State]++
		g.PendingCommands += len(w.pending)
		g.Unconfirmed += len(w.unconfirmed)
	}
	for _, ex := range p.execs {
		g.Execs[ex.State]++
	}
	for _, inv := range p.invocations {
		g.Invocations[inv.State]++
	}
	return g
}
