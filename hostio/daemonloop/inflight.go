package daemonloop

import (
	"context"
	"sync"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// workKind is what a workKey's id names: exec_ids and invocation_ids are
// two namespaces, and the same string may be in both.
type workKind uint8

const (
	execWork workKind = iota + 1 // an exec, by exec_id
	runWork                      // a run, by invocation_id
)

// workKey names one exec or run. An exec and a run never share a key,
// whatever their ids.
type workKey struct {
	kind workKind
	id   string
}

func execKey(execID string) workKey      { return workKey{kind: execWork, id: execID} }
func runKey(invocationID string) workKey { return workKey{kind: runWork, id: invocationID} }

// working is what the driver keeps of one exec or run in flight.
type working struct {
	// cancel stops it alone, for a cancel command.
	cancel context.CancelFunc
	// tail is a run's output, the stdout_tail each poll reports for it,
	// written by its runner; nil for an exec.
	tail *runners.Tail
}

// workInFlight is the execs and runs in flight, one entry each. The loop
// adds one when it starts the work and fills polls from the runs' tails;
// the work's goroutine drops its entry when the work returned, before it
// feeds the end back: once the core heard of the end it may start the
// same id again (a redelivery, without the cursor extension), and a
// cancel of work that returned has nothing left to stop. A poll sent
// between the two reports the run with an empty tail, which a control
// plane ignores. The zero value is ready.
type workInFlight struct {
	mu sync.Mutex
	m  map[workKey]*working
}

// start adds work k, with a context of its own under parent, and a fresh
// Tail for a run (nil for an exec). Work started again under the same key
// (a redelivery) starts afresh. done forgets it and cancels its context;
// it forgets only the entry this start added, so the done of an earlier
// start under k leaves a later one's cancel and tail in place.
func (f *workInFlight) start(parent context.Context, k workKey) (ctx context.Context, tail *runners.Tail, done func()) {
	ctx, cancel := context.WithCancel(parent)
	if k.kind == runWork {
		tail = runners.NewTail()
	}
	w := &working{cancel: cancel, tail: tail}
	f.mu.Lock()
	if f.m == nil {
		f.m = map[workKey]*working{}
	}
	f.m[k] = w
	f.mu.Unlock()
	return ctx, tail, func() {
		f.mu.Lock()
		if f.m[k] == w {
			delete(f.m, k)
		}
		f.mu.Unlock()
		cancel()
	}
}

// cancelOf is what stops work k alone, nil when it is not in flight.
func (f *workInFlight) cancelOf(k workKey) context.CancelFunc {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.m[k]; w != nil {
		return w.cancel
	}
	return nil
}

// fill is the core's list of runs in flight with each one's stdout_tail
// filled in from its Tail. The list is copied first: it is the core's.
func (f *workInFlight) fill(list []wire.InvocationStatus) []wire.InvocationStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(list) == 0 || len(f.m) == 0 {
		return list
	}
	out := make([]wire.InvocationStatus, len(list))
	copy(out, list)
	for i := range out {
		if w := f.m[runKey(out[i].InvocationID)]; w != nil && w.tail != nil {
			out[i].StdoutTail = w.tail.String()
		}
	}
	return out
}
