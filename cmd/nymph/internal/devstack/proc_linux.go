package devstack

import "syscall"

// childAttr puts a child in its own process group (so a terminal's Ctrl-C
// reaches only the parent, which stops children in order) and has the
// kernel SIGKILL it if the parent dies without cleaning up.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(pid int, sig syscall.Signal) { syscall.Kill(-pid, sig) }
