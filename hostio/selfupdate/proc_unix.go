//go:build unix

package selfupdate

import "syscall"

// supported says an update can be applied here.
func supported() error { return nil }

// ownGroup starts the watchdog in a process group of its own, so a Ctrl-C
// to the daemon's group does not end it.
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// ownSession starts the restored daemon in a session of its own: the
// watchdog that starts it is about to exit.
func ownSession() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// kill ends the new binary that neither said hello nor restored itself.
func kill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
