//go:build unix && !linux

package relay

import "golang.org/x/sys/unix"

// dirFlag opens a directory that is walked and statted through. Without
// Linux's O_PATH it is a read-only open, which needs read permission on
// the directory; the relay lists every directory it opens anyway.
const dirFlag = unix.O_RDONLY

// open opens rel beneath the prefix. Without openat2's RESOLVE_BENEATH it
// walks rel one component at a time from the prefix's fd, each opened
// with O_NOFOLLOW: a symlink anywhere fails with ELOOP, a ".." with
// EXDEV, so nothing swapped in after a check leads out of the prefix.
// That is stricter than Linux, which follows a symlink that stays
// beneath; the paths the relay opens are resolved when a machine
// directory is admitted (machineDir), so they hold none.
func (r *root) open(rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	fd, err := openBeneath(r.fd, rel, flags, mode)
	return fd, openErr(r.path, rel, err)
}
