package fifoclient

import "golang.org/x/sys/unix"

// fionread is macOS's FIONREAD, _IOR('f', 127, int) in <sys/filio.h>,
// which x/sys/unix does not export for darwin.
const fionread = 0x4004667f

// unreadBytes is how many bytes a pipe holds (FIONREAD).
func unreadBytes(fd int) (int, error) { return unix.IoctlGetInt(fd, fionread) }
