package plane

import (
	"fmt"
	"maps"
	"slices"
)

// RunningIndexError says how the per-worker index of running invocations
// (runningOn) and alive differ from the invocation records, "" when they
// agree. The transcripts check it after every step.
func (p *Plane) RunningIndexError() string {
	want := map[string][]string{}
	for id, inv := range p.invocations {
		if inv.State == InvocationRunning {
			want[inv.WorkerID] = append(want[inv.WorkerID], id)
		}
	}
	for w := range want {
		slices.Sort(want[w])
	}
	got := map[string][]string{}
	for w := range p.runningOn {
		got[w] = p.runningOf(w)
	}
	if !maps.EqualFunc(want, got, slices.Equal) {
		return fmt.Sprintf("running by worker: records say %v, the index %v", want, got)
	}
	if len(p.alive) != countAll(want) {
		return fmt.Sprintf("alive holds %d, records say %d running", len(p.alive), countAll(want))
	}
	return ""
}

// SetupIndexError says how the index of setups in flight (setupBy)
// differs from the worker records, "" when they agree. The transcripts
// check it after every step.
func (p *Plane) SetupIndexError() string {
	want := map[string]string{}
	for _, w := range p.workerOrder {
		for _, s := range w.rec.SetupsInFlight {
			want[s.CommandID] = w.ID()
		}
	}
	got := map[string]string{}
	for id, w := range p.setupBy {
		got[id] = w.ID()
		if p.workers[w.ID()] != w {
			return fmt.Sprintf("setup %s is indexed on worker %s, which the plane no longer has", id, w.ID())
		}
	}
	if !maps.Equal(want, got) {
		return fmt.Sprintf("setups in flight: records say %v, the index %v", want, got)
	}
	return ""
}

func countAll(m map[string][]string) (n int) {
	for _, v := range m {
		n += len(v)
	}
	return n
}
