package relay

import "golang.org/x/sys/unix"

// dirFlag opens a directory that is only walked and statted through:
// O_PATH needs no read permission on it.
const dirFlag = unix.O_PATH

// open opens rel beneath the prefix. The last component is never followed
// when it is a symlink (O_NOFOLLOW): a pipe must be a pipe.
func (r *root) open(rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if !r.noOpenat2.Load() {
		fd, err := unix.Openat2(r.fd, rel, &unix.OpenHow{
			Flags:   uint64(flags),
			Mode:    uint64(mode),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != unix.ENOSYS && err != unix.EPERM {
			return fd, openErr(r.path, rel, err)
		}
		// ENOSYS: an old kernel; EPERM: a seccomp filter that predates it.
		r.noOpenat2.Store(true)
	}
	fd, err := unix.Openat(r.fd, rel, flags, mode)
	return fd, openErr(r.path, rel, err)
}
