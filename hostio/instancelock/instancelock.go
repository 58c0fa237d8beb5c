// Package instancelock keeps a second nymph process off a directory that
// one already runs in: the daemon's state directory, the relay's prefix.
//
// It decides the lock (flock(2) on a file in the directory, released by
// the kernel when the process dies, so a kill -9 leaves nothing stale),
// the file's name and what it says of its holder (pid and command line),
// and the message a refused start prints. It does not decide which
// directory a program locks.
//
// On Windows the lock is LockFileEx on one byte far past the holder's
// line, which Windows also drops when the process dies; locking the line
// itself would keep a refused start from reading who holds it.
package instancelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FileName is the lock file inside a locked directory.
const FileName = ".nymph.lock"

// Lock is a held lock; Release lets it go (so does the process's exit).
type Lock struct {
	f *os.File
}

// HeldError says another live process holds the lock.
type HeldError struct {
	What    string // "daemon state directory", "relay prefix"
	Dir     string
	PID     int    // 0 when the holder wrote nothing readable
	Command string // the holder's command line
	Hint    string // how to run a second one elsewhere
}

func (e *HeldError) Error() string {
	holder := "another process"
	stop := ""
	if e.PID > 0 {
		holder = fmt.Sprintf("another process (pid %d: %s)", e.PID, e.Command)
		stop = fmt.Sprintf("stop it (kill %d) or ", e.PID)
	}
	return fmt.Sprintf("%s %s is in use by %s; %s%s", e.What, e.Dir, holder, stop, e.Hint)
}

// ErrHeld matches every HeldError.
var ErrHeld = errors.New("instancelock: held by another process")

// Is makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Acquire locks dir (created 0700 when absent) for this process, or
// returns a *HeldError naming the holder. what names the directory in
// messages; hint says how to start another instance without colliding.
func Acquire(dir, what, hint string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock %s %s: %w", what, dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|openFlags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s %s: %w", what, dir, err)
	}
	if err := lockFile(f); err != nil {
		defer f.Close()
		if isHeld(err) {
			held := &HeldError{What: what, Dir: dir, Hint: hint}
			held.PID, held.Command = awaitHolder(f)
			return nil, held
		}
		return nil, fmt.Errorf("lock %s %s: %w", what, path, err)
	}
	if err := writeHolder(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s %s: %w", what, path, err)
	}
	return &Lock{f: f}, nil
}

// writeHolder records this process in the lock file, for the message
// another start prints.
// The line is written before the file is cut to it, so a reader never
// finds the file empty once a holder has written (a longer line of an
// earlier holder only leaves bytes past the first newline).
func writeHolder(f *os.File) error {
	line := strconv.Itoa(os.Getpid()) + " " + strings.Join(os.Args, " ") + "\n"
	if _, err := f.WriteAt([]byte(line), 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(line)))
}

// holderWait bounds how long a refused Acquire waits for the holder's
// line: a holder that has just taken the lock writes it a moment later
// (longer on a loaded host).
const holderWait = time.Second

// awaitHolder reads the holder's line, waiting up to holderWait for one
// that has taken the lock and not yet written it.
func awaitHolder(f *os.File) (int, string) {
	deadline := time.Now().Add(holderWait)
	for {
		pid, cmd := readHolder(f)
		if pid > 0 || time.Now().After(deadline) {
			return pid, cmd
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readHolder(f *os.File) (int, string) {
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	first, _, _ := strings.Cut(string(buf[:n]), "\n")
	pid, cmd, _ := strings.Cut(first, " ")
	p, err := strconv.Atoi(pid)
	if err != nil || p <= 0 {
		return 0, ""
	}
	return p, cmd
}

// Release unlocks and closes the lock file. The file stays: removing it
// would race a process that opened it to wait for the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
