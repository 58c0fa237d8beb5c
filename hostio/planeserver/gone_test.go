package planeserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

// gatedStore holds Apply while its gate is set, and says when one waits.
type gatedStore struct {
	*MemStore
	mu      sync.Mutex
	gate    chan struct{}
	waiting chan struct{}
}

func (s *gatedStore) Apply(ctx context.Context, b plane.Batch) error {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		s.waiting <- struct{}{}
		<-g
	}
	return s.MemStore.Apply(ctx, b)
}

// A parked poll whose daemon leaves in the same group of steps that hands
// it a command (the exec that wakes it and its Gone queued together
// behind a slow Apply) does not lose the command: the reply that never
// went out is taken back, and the daemon's next poll gets the exec.
func TestPollGoneInTheGroupThatWakesItKeepsItsCommand(t *testing.T) {
	store := &gatedStore{MemStore: NewMemStore(), waiting: make(chan struct{}, 1)}
	ts := newTestServer(t, store, func(c *Config) { c.TickEvery = time.Hour })
	w, other := ts.hello("m1"), ts.hello("m2")

	leave := ts.parkPoll(w)

	// Hold the loop in one group's Apply...
	gate := make(chan struct{})
	store.mu.Lock()
	store.gate = gate
	store.mu.Unlock()
	go ts.admin("POST", idPath(operator.PathExec, other), operator.ExecRequest{Command: "other"}, nil)
	<-store.waiting
	store.mu.Lock()
	store.gate = nil
	store.mu.Unlock()
	// ...while the exec for the parked worker and its poll's Gone queue
	// behind it, to be stepped in the next group together.
	accepted := make(chan operator.ExecAccepted, 1)
	go func() {
		var acc operator.ExecAccepted
		ts.admin("POST", idPath(operator.PathExec, w), operator.ExecRequest{Command: "must run"}, &acc)
		accepted <- acc
	}()
	time.Sleep(100 * time.Millisecond)
	leave()
	time.Sleep(100 * time.Millisecond)
	close(gate)
	acc := <-accepted

	resp := ts.poll(w, 0.5)
	if len(resp.Commands) != 1 {
		var st operator.ExecStatus
		ts.admin("GET", idPath(operator.PathExecStatus, acc.ExecID), nil, &st)
		t.Fatalf("the next poll got %d commands; exec %s is %s, its command lost", len(resp.Commands), acc.ExecID, st.State)
	}
}
