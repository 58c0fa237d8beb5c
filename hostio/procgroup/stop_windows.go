package procgroup

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// errNoGroups is what asking after a group gets on Windows.
var errNoGroups = errors.New("procgroup: Windows has no process groups to signal")

// Signal ends the process pid itself: Windows has no process groups to
// signal and no SIGTERM a program can catch, so SIGTERM and SIGKILL both
// terminate it at once (TerminateProcess), and what it started lives on.
// Signal 0, a probe of the group, reports errNoGroups.
func Signal(pid int, sig syscall.Signal) error {
	if sig == 0 {
		return errNoGroups
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	defer p.Release()
	return p.Kill()
}

// Stop terminates the process pid (see Signal: there is no group and no
// gentler signal) and waits for leaderGone. Unlike the POSIX Stop it
// sends nothing once the leader is reaped: without a group, the pid alone
// would name whatever process reuses it. killed reports that the process
// outlived the grace and was terminated again.
func Stop(pid int, leaderGone <-chan struct{}, grace time.Duration) (killed bool) {
	_ = Signal(pid, syscall.SIGKILL)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	select {
	case <-leaderGone:
		return false
	case <-deadline.C:
		_ = Signal(pid, syscall.SIGKILL)
		<-leaderGone
		return true
	}
}
