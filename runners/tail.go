package runners

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/nymphd/nymph/wirecore/wire"
)

// TailMax is how much output a Tail keeps: wire.StdoutTailMax, the bound
// of a poll's stdout_tail.
const TailMax = wire.StdoutTailMax

// Tail keeps the last TailMax bytes of a run's output, for the stdout_tail
// a poll reports while the run is in flight. A runner that has its child's
// pipes writes both streams into it as they come (Write); one that follows
// a remote job refreshes it from the job's output (Replace). It is safe
// for concurrent use; a nil *Tail takes every write and keeps nothing.
type Tail struct {
	mu  sync.Mutex
	buf []byte
	// cut is true once bytes were dropped from the front: the first rune
	// kept may then have lost its leading bytes.
	cut bool
}

// NewTail returns an empty Tail.
func NewTail() *Tail { return &Tail{} }

// Write appends p, keeping the last TailMax bytes. It never fails.
func (t *Tail) Write(p []byte) (int, error) {
	if t == nil {
		return len(p), nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.appendLocked(p)
	return len(p), nil
}

// Set makes t hold what from holds: a runner that reads a job's output
// anew (a Pod's log) writes it into a fresh Tail, bounded as it comes, and
// then sets its run's Tail from it.
func (t *Tail) Set(from *Tail) {
	if t == nil || from == nil || t == from {
		return
	}
	from.mu.Lock()
	b, cut := append([]byte(nil), from.buf...), from.cut
	from.mu.Unlock()
	t.replace(b, cut)
}

// replace makes p the whole output seen so far (its last TailMax bytes);
// cut says p is itself the end of a longer output.
func (t *Tail) replace(p []byte, cut bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = t.buf[:0]
	t.cut = cut
	t.appendLocked(p)
}

// ReadFileEnd makes the last TailMax bytes of the file at path t's
// output: a runner whose job writes its output to a file it can read (the
// slurm runner's slurm.out) refreshes the run's Tail with it. A file not
// there yet is an error wrapping fs.ErrNotExist, and leaves t as it was.
func (t *Tail) ReadFileEnd(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("runners: read output %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("runners: read output %s: %w", path, err)
	}
	var off int64
	if fi.Size() > TailMax {
		off = fi.Size() - TailMax
	}
	b := make([]byte, TailMax)
	n, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("runners: read output %s: %w", path, err)
	}
	t.replace(b[:n], off > 0)
	return nil
}

func (t *Tail) appendLocked(p []byte) {
	if len(p) >= TailMax {
		t.cut = t.cut || len(p) > TailMax || len(t.buf) > 0
		t.buf = append(t.buf[:0], p[len(p)-TailMax:]...)
		return
	}
	if over := len(t.buf) + len(p) - TailMax; over > 0 {
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
		t.cut = true
	}
	if t.buf == nil {
		t.buf = make([]byte, 0, TailMax)
	}
	t.buf = append(t.buf, p...)
}

// String is the output kept, as valid UTF-8 of at most TailMax bytes: a
// rune whose leading bytes were dropped is left out at the front, one not
// yet complete at the end (the rest of it is still to be written), and
// bytes that are no UTF-8 read as U+FFFD, so the msgpack str a poll
// carries is valid.
func (t *Tail) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	b := string(t.buf)
	cut := t.cut
	t.mu.Unlock()
	return clean(b, cut)
}

// clean is String's rule for the bytes b (cut: b lost its front).
func clean(b string, cut bool) string {
	for i := 0; cut && i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	b = b[:len(b)-unfinished(b)]
	if !utf8.ValidString(b) {
		b = strings.ToValidUTF8(b, "\uFFFD")
	}
	return wire.StdoutTailOf(b)
}

// unfinished is the length of an incomplete rune at the end of s: the
// start of a multi-byte sequence whose last bytes are still missing.
func unfinished(s string) int {
	for n := 1; n < utf8.UTFMax && n <= len(s); n++ {
		c := s[len(s)-n]
		if !utf8.RuneStart(c) {
			continue
		}
		if c >= utf8.RuneSelf && !utf8.FullRuneInString(s[len(s)-n:]) {
			return n
		}
		return 0
	}
	return 0
}
