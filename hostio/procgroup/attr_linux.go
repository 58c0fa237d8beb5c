package procgroup

import "syscall"

// Attr puts a child in its own process group, so a stop reaches the
// processes it starts and a terminal's Ctrl-C reaches only the parent, and
// has the kernel SIGKILL it if the parent dies without stopping it.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
