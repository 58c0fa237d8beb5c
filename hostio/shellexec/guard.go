package shellexec

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nymphd/nymph/hostio/procgroup"
	"github.com/nymphd/nymph/wirecore/wire"
)

// guard stops one shell's process group when its timeout fires or its
// context is cancelled, while the exec's own goroutine waits for the
// shell. Whichever comes first decides the exit code: a shell reaped
// before the guard fired keeps its own; a guard that fired first makes it
// -2 (timeout) or -1 (cancel) and holds the caller until the group is
// gone.
type guard struct {
	pid      int
	grace    time.Duration
	stopping func() // told first when a stop begins
	log      *slog.Logger

	mu       sync.Mutex
	isReaped bool
	code     int // the sentinel of the stop that began; 0 while none did
	gone     chan struct{}
	stopped  chan struct{}
}

func newGuard(pid int, grace time.Duration, stopping func(), log *slog.Logger) *guard {
	return &guard{pid: pid, grace: grace, stopping: stopping, log: log,
		gone: make(chan struct{}), stopped: make(chan struct{})}
}

// arm starts watching ctx and, when timeout > 0, the timeout. The
// returned func disarms both; stops already begun still finish.
func (g *guard) arm(ctx context.Context, timeout time.Duration) (disarm func()) {
	stopCtx := context.AfterFunc(ctx, func() {
		g.stop(wire.ExitSpawnFailed, "exec cancelled; stopping its process group")
	})
	if timeout <= 0 {
		return func() { stopCtx() }
	}
	t := time.AfterFunc(timeout, func() {
		g.stop(wire.ExitTimeout, "exec timed out; stopping its process group")
	})
	return func() { stopCtx(); t.Stop() }
}

// stop escalates SIGTERM → grace → SIGKILL on the group, unless the shell
// was already reaped or another stop began.
func (g *guard) stop(code int, why string) {
	g.mu.Lock()
	if g.isReaped || g.code != 0 {
		g.mu.Unlock()
		return
	}
	g.code = code
	g.mu.Unlock()
	g.log.Info(why)
	g.stopping()
	procgroup.Stop(g.pid, g.gone, g.grace)
	close(g.stopped)
}

// reaped records that Wait returned waitErr and gives the exit code the
// protocol wants; when a stop began first it waits for the stop to end.
func (g *guard) reaped(waitErr error) (int, error) {
	g.mu.Lock()
	g.isReaped = true
	code := g.code
	g.mu.Unlock()
	close(g.gone)
	if code == 0 {
		return exitCode(waitErr)
	}
	<-g.stopped
	return code, nil
}
