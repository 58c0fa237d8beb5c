//go:build unix && !linux

package devstack

import "syscall"

// childAttr puts a child in its own process group. Without a parent-death
// signal on this system, Stop on every exit path is what ends children.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func signalGroup(pid int, sig syscall.Signal) { syscall.Kill(-pid, sig) }
