//go:build unix && !linux

package procgroup

import "syscall"

// Attr puts a child in its own process group, so a stop reaches the
// processes it starts and a terminal's Ctrl-C reaches only the parent.
// This system has no parent-death signal: a parent must stop its children
// on every exit path.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
