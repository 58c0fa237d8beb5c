//go:build unix

package relay

import (
	"strings"

	"golang.org/x/sys/unix"
)

// openBeneath opens rel beneath dirfd one component at a time, each
// directory opened with O_NOFOLLOW: a symlink on the way fails with
// ELOOP, a ".." with EXDEV. flags apply to the last component, which the
// caller opens with O_NOFOLLOW too. It is what other systems have of
// openat2's RESOLVE_BENEATH (root_other.go); it builds on Linux too, so
// the Linux tests run it.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	var parts []string
	for _, c := range strings.Split(rel, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return -1, unix.EXDEV
		}
		parts = append(parts, c)
	}
	if len(parts) == 0 {
		return unix.Openat(dirfd, ".", flags, mode)
	}
	cur := dirfd
	defer func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}()
	for _, c := range parts[:len(parts)-1] {
		next, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOTDIR && isSymlinkAt(cur, c) {
			// Linux checks O_DIRECTORY before O_NOFOLLOW; say what it is.
			err = unix.ELOOP
		}
		if err != nil {
			return -1, err
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		cur = next
	}
	return unix.Openat(cur, parts[len(parts)-1], flags, mode)
}

func isSymlinkAt(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK
}
