package instancelock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// openFlags are added to the lock file's open: none, os.OpenFile's handle
// is not inherited by children on Windows anyway.
const openFlags = 0

// lockOffset is where the locked byte lies: a Windows byte-range lock is
// mandatory, so it must not cover the holder's line that readHolder reads
// from another process. A range past the end of a file can be locked.
const lockOffset = 1 << 62

// lockFile takes an exclusive LockFileEx on one byte at lockOffset
// without waiting.
func lockFile(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lockErr error
	if err := raw.Control(func(fd uintptr) {
		ol := &windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
		lockErr = windows.LockFileEx(windows.Handle(fd),
			windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	}); err != nil {
		return err
	}
	return lockErr
}

// isHeld reports a lockFile error that means another process holds it.
func isHeld(err error) bool { return errors.Is(err, windows.ERROR_LOCK_VIOLATION) }
