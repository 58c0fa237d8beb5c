package selfupdate

import (
	"errors"
	"os"
	"syscall"
)

// errUnsupported is every update's answer on Windows: an update replaces
// the running binary by rename(2) and exec(2)s the new one at the same
// pid, and Windows can do neither (a running .exe cannot be renamed over,
// and there is no exec). Check refuses before anything is fetched.
var errUnsupported = errors.New("selfupdate: over-the-air updates are not supported on Windows; install the new binary by hand and restart the daemon")

func supported() error { return errUnsupported }

// ownGroup starts the watchdog in a new process group, so a console's
// Ctrl-C does not reach it.
func ownGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// ownSession is ownGroup: Windows has no sessions to start.
func ownSession() *syscall.SysProcAttr { return ownGroup() }

// kill terminates pid (TerminateProcess: Windows has no SIGKILL).
func kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	defer p.Release()
	return p.Kill()
}
