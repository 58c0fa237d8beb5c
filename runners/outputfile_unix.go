//go:build unix

package runners

import (
	"os"
	"syscall"
)

// openFlags open a file the child may have planted: never through a
// symlink, and never waiting on a FIFO (a regular file ignores
// O_NONBLOCK).
const openFlags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
