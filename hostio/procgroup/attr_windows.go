package procgroup

import "syscall"

// Attr starts a child in a new process group, which on Windows only means
// that a console's Ctrl-C reaches the parent and not the child. Windows
// has neither a signal to the group nor a parent-death signal: Stop
// terminates the child alone, and a parent must stop its children on
// every exit path.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}
