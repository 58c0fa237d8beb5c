//go:build unix

package procgroup

import (
	"syscall"
	"time"
)

// Signal sends sig to every process of the group pgid.
func Signal(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// Stop sends SIGTERM to the process group pgid, gives the group up to
// grace to exit, then sends SIGKILL to whatever is left of it. leaderGone
// is closed once the leader is reaped; Stop returns after that. killed
// reports that the leader itself outlived the grace and was sent SIGKILL.
func Stop(pgid int, leaderGone <-chan struct{}, grace time.Duration) (killed bool) {
	_ = Signal(pgid, syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	select {
	case <-leaderGone:
		// The leader is reaped; members may linger (a child ignoring
		// SIGTERM). Poll the group until it is empty or the grace ends.
		waitGroupEmpty(pgid, deadline.C)
		_ = Signal(pgid, syscall.SIGKILL)
		return false
	case <-deadline.C:
		_ = Signal(pgid, syscall.SIGKILL)
		<-leaderGone
		return true
	}
}

func waitGroupEmpty(pgid int, deadline <-chan time.Time) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for Signal(pgid, 0) == nil {
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}
