//go:build unix

package relay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// root is the prefix directory, held open so that every pipe and spool file
// is opened beneath it: openat2 with RESOLVE_BENEATH on Linux
// (root_linux.go), a walk of openat calls elsewhere (root_other.go),
// refuses a symlink or ".." that would leave the prefix, even one swapped
// in after a check.
type root struct {
	path string // absolute, symlinks resolved
	fd   int    // dirFlag|O_DIRECTORY
	// noOpenat2 is set on kernels without openat2; opens then rely on the
	// EvalSymlinks check done when a machine directory was admitted.
	noOpenat2 atomic.Bool
}

func openRoot(prefix string) (*root, error) {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return nil, fmt.Errorf("relay: prefix %s: %w", prefix, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("relay: prefix %s: %w", prefix, err)
	}
	fd, err := unix.Open(real, dirFlag|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("relay: open prefix %s: %w", real, err)
	}
	return &root{path: real, fd: fd}, nil
}

func (r *root) close() { unix.Close(r.fd) }

// errEscape reports a path that resolves outside the prefix.
var errEscape = errors.New("resolves outside the prefix")

// machineDir admits the entry name of the prefix as a machine directory and
// returns its path relative to the prefix with symlinks resolved. A symlink
// is followed only when its target stays beneath the prefix.
func (r *root) machineDir(name string) (string, unix.Stat_t, error) {
	var st unix.Stat_t
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return "", st, fmt.Errorf("relay: machine %q: not a directory name", name)
	}
	full := filepath.Join(r.path, name)
	if err := unix.Lstat(full, &st); err != nil {
		return "", st, fmt.Errorf("relay: stat %s: %w", full, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return name, st, nil // the common case: no link to resolve
	case unix.S_IFLNK:
	default:
		return "", st, fmt.Errorf("relay: machine %s: not a directory", full)
	}
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", st, fmt.Errorf("relay: machine %s: %w", full, err)
	}
	rel, err := filepath.Rel(r.path, real)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", st, fmt.Errorf("relay: machine %s: %w", full, errEscape)
	}
	if err := unix.Stat(real, &st); err != nil {
		return "", st, fmt.Errorf("relay: stat %s: %w", real, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", st, fmt.Errorf("relay: machine %s: not a directory", full)
	}
	return rel, st, nil
}

func openErr(dir, rel string, err error) error {
	switch err {
	case nil:
		return nil
	case unix.EXDEV:
		return fmt.Errorf("relay: open %s: %w", filepath.Join(dir, rel), errEscape)
	case unix.ELOOP:
		return fmt.Errorf("relay: open %s: is a symlink", filepath.Join(dir, rel))
	}
	return fmt.Errorf("relay: open %s: %w", filepath.Join(dir, rel), err)
}

// errShared reports a pipe or directory that every user may write.
var errShared = errors.New("writable by every user (o+w); start with --allow-shared-writers to accept it")

// checkMode refuses what is not of kind (unix.S_IFIFO, S_IFDIR, S_IFREG)
// and, unless shared writers are allowed, what others may write.
func checkMode(st *unix.Stat_t, kind uint32, allowShared bool, path string) error {
	if uint32(st.Mode)&unix.S_IFMT != kind { // uint16 on macOS
		return fmt.Errorf("relay: %s: %w", path, errWrongKind(kind))
	}
	if !allowShared && st.Mode&0o002 != 0 {
		return fmt.Errorf("relay: %s: %w", path, errShared)
	}
	return nil
}

func errWrongKind(kind uint32) error {
	switch kind {
	case unix.S_IFIFO:
		return errors.New("not a FIFO")
	case unix.S_IFDIR:
		return errors.New("not a directory")
	}
	return errors.New("not a regular file")
}

// openChecked opens rel beneath the prefix and refuses it, closing the fd,
// unless it is of kind and passes the shared-writer rule. The check is on
// the opened fd, so nothing can be swapped in between.
func (r *root) openChecked(rel string, flags int, kind uint32, allowShared bool) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := r.open(rel, flags, 0)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, fmt.Errorf("relay: fstat %s: %w", filepath.Join(r.path, rel), err)
	}
	if err := checkMode(&st, kind, allowShared, filepath.Join(r.path, rel)); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// readDir lists the directory rel beneath the prefix.
func (r *root) readDir(rel string) ([]os.DirEntry, error) {
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(r.path, rel))
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("relay: list %s: %w", f.Name(), err)
	}
	return ents, nil
}

// lstat stats rel beneath the prefix without following its last component.
func (r *root) lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(r.fd, rel, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return st, fmt.Errorf("relay: stat %s: %w", filepath.Join(r.path, rel), err)
	}
	return st, nil
}
