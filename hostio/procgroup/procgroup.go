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
//
// Windows has no process groups: there a stop terminates the child alone
// (stop_windows.go).
package procgroup

import (
	"context"
	"os/exec"
	"time"
)

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
