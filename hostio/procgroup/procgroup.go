// Package procgroup runs a child as the leader of its own process group and
// stops that group: SIGTERM to every member, up to a grace for them to
// exit, then SIGKILL to whatever is left. The shell of an exec, a run's
// entry or docker client, and the children of `nymph dev` are all stopped
// this way.
//
// It decides how a child is tied to its group and to its parent (Attr),
// and the escalation (Stop). It does not decide the grace, which callers
// pass, what a stop means to them (an exit code, a run's outcome), or a
// runner's own way of stopping (WaitOrStop calls it first, when given).
package procgroup

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// Signal sends sig to every process of the group pgid.
func Signal(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// WaitOrStop waits for cmd, started as the leader of its own process
// group (Attr). If ctx ends first it calls onStop (when set; a runner's
// own stop, such as `docker stop`) and stops the group: SIGTERM, up to
// grace, SIGKILL. It reports whether it stopped the group, and otherwise
// what Wait returned.
func WaitOrStop(ctx context.Context, cmd *exec.Cmd, grace time.Duration, onStop func()) (stopped bool, err error) {
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		return false, err
	case <-ctx.Done():
	}
	if onStop != nil {
		onStop()
	}
	gone := make(chan struct{})
	go func() { <-waited; close(gone) }()
	Stop(cmd.Process.Pid, gone, grace)
	return true, nil
}

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
