package fifoclient

import "golang.org/x/sys/unix"

// unreadBytes is how many bytes a pipe holds (FIONREAD, which Linux names
// TIOCINQ); it works on either end.
func unreadBytes(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.TIOCINQ) }
