package daemonloop

import (
	"sync"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// runTails is the output of the runs in flight, by invocation_id: the
// stdout_tail each poll reports for them. The loop adds a run's Tail when
// it starts it and fills polls from them; the run's goroutine drops it
// when the run ended (a poll sent before the core hears of the end then
// reports it with an empty tail, which a control plane ignores). The
// Tails themselves are written by the runners. The zero value is ready.
type runTails struct {
	mu sync.Mutex
	m  map[string]*runners.Tail
}

// add gives a run that starts its Tail. A run started again under the
// same id (a redelivery) starts afresh.
func (t *runTails) add(id string) *runners.Tail {
	tail := runners.NewTail()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*runners.Tail{}
	}
	t.m[id] = tail
	return tail
}

// drop forgets a run that ended.
func (t *runTails) drop(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

// fill is the core's list of runs in flight with each one's stdout_tail
// filled in from its Tail. The list is copied first: it is the core's.
func (t *runTails) fill(list []wire.InvocationStatus) []wire.InvocationStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(list) == 0 || len(t.m) == 0 {
		return list
	}
	out := make([]wire.InvocationStatus, len(list))
	copy(out, list)
	for i := range out {
		if tail, ok := t.m[out[i].InvocationID]; ok {
			out[i].StdoutTail = tail.String()
		}
	}
	return out
}
