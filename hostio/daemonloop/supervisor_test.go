package daemonloop

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/daemon"
)

// supervisorRecorder records what the loop tells a service manager.
type supervisorRecorder struct {
	every time.Duration

	mu     sync.Mutex
	states []string // each state once, in the order first seen
	alive  int
	// aliveIn counts heartbeats by the state they came in.
	aliveIn map[string]int
	last    string
}

func (r *supervisorRecorder) State(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s != r.last {
		r.states = append(r.states, s)
	}
	r.last = s
}

func (r *supervisorRecorder) Alive() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alive++
	r.aliveIn[r.last]++
}

func (r *supervisorRecorder) AliveEvery() time.Duration { return r.every }

func (r *supervisorRecorder) snapshot() ([]string, int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states), r.alive, maps.Clone(r.aliveIn)
}

// The supervisor hears hello, then polling, then draining (an exec still
// runs) and exiting on a SIGTERM; and heartbeats keep coming while a poll
// is parked, when no step happens at all.
func TestSupervisorHearsStatesAndHeartbeats(t *testing.T) {
	rec := &supervisorRecorder{every: 10 * time.Millisecond, aliveIn: map[string]int{}}
	h := startDaemon(t, func(_ *daemon.Config, o *Options, _ *plane) { o.Supervisor = rec })
	h.parked()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, in := rec.snapshot()
		if in[daemon.StatePolling] >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeats while parked: %v", in)
		}
		time.Sleep(5 * time.Millisecond)
	}
	marker := h.workdir + "/started"
	h.plane.push(execCmd("s1", "touch "+marker+"; sleep 0.3", nil))
	testkit.WaitFile(t, 30*time.Second, marker)
	h.sigs <- daemon.SignalTerm
	if r := h.exit(); r.Code != 0 {
		t.Fatalf("exit %+v", r)
	}
	states, _, _ := rec.snapshot()
	want := []string{daemon.StateHello, daemon.StatePolling, daemon.StateDraining, daemon.StateExiting}
	if !slices.Equal(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}

	// After Run returned no heartbeat comes any more.
	_, n, _ := rec.snapshot()
	time.Sleep(50 * time.Millisecond)
	if _, after, _ := rec.snapshot(); after != n {
		t.Fatalf("%d heartbeats after the loop ended", after-n)
	}
}
