//go:build unix

package instancelock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// openFlags are added to the lock file's open.
const openFlags = unix.O_CLOEXEC

// lockFile takes flock(2) LOCK_EX on f without waiting.
func lockFile(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lockErr error
	if err := raw.Control(func(fd uintptr) {
		for {
			lockErr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
			if lockErr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return lockErr
}

// isHeld reports a lockFile error that means another process holds it.
func isHeld(err error) bool { return errors.Is(err, unix.EWOULDBLOCK) }
