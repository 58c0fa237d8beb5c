//go:build unix && !linux && !darwin

package fifoclient

import "golang.org/x/sys/unix"

// unreadBytes is how many bytes a pipe holds (FIONREAD).
func unreadBytes(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.FIONREAD) }
