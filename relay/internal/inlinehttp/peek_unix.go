//go:build unix

package inlinehttp

import "syscall"

// idleOpen peeks at an idle connection's socket without waiting: EAGAIN
// (nothing to read) means it is still open.
func idleOpen(rc syscall.RawConn) bool {
	open := false
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN
		return true // never wait
	})
	return err == nil && open
}
