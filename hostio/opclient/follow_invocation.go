package opclient

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// FollowEvery is how often FollowInvocation looks at the invocation. The
// tail it shows is only as fresh as the last poll of the invocation's
// daemon: one per long-poll ([poll] wait_max_s, 20 s by default), or
// sooner when commands come.
const FollowEvery = time.Second

// GapMarker is the line TailFollower prints where output was missed: more
// came between two looks than a tail holds (wire.StdoutTailMax), or the
// output started over (the run was delivered again).
const GapMarker = "…\n"

// minOverlap is the least overlap between two full tails taken for one:
// a shorter match is as likely chance as the same bytes.
const minOverlap = 32

// TailFollower turns the successive stdout_tails of one invocation — each
// the last bytes of its output so far, a window that slides as the output
// grows — into the bytes not printed yet. Its zero value is ready.
type TailFollower struct {
	prev string
	// printed is true once anything was returned; lineOpen when that
	// did not end with a newline.
	printed, lineOpen bool
}

// Next is what to print for tail, the stdout_tail just read: the bytes
// that follow what the previous tail ended with, or GapMarker and the
// whole tail when the two do not overlap. An empty tail (none reported
// yet, or a control plane that restarted) prints nothing and is not
// taken as the new start.
func (f *TailFollower) Next(tail string) string {
	prev := f.prev
	if tail == "" || tail == prev {
		return ""
	}
	f.prev = tail
	var out string
	switch {
	case prev == "" && !fullTail(tail):
		out = tail
	case prev == "":
		out = f.marker() + tail
	default:
		if i, ok := NewOutputAt(prev, tail); ok {
			out = tail[i:]
		} else {
			out = f.marker() + tail
		}
	}
	if out != "" {
		f.printed = true
		f.lineOpen = !strings.HasSuffix(out, "\n")
	}
	return out
}

// End is what to print once the invocation ended: a newline when the
// output printed did not end with one, so what follows starts a line.
func (f *TailFollower) End() string {
	if f.lineOpen {
		f.lineOpen = false
		return "\n"
	}
	return ""
}

// marker is GapMarker on a line of its own.
func (f *TailFollower) marker() string {
	if f.lineOpen {
		return "\n" + GapMarker
	}
	return GapMarker
}

// fullTail reports whether tail may have lost its front: it is as long as
// a tail gets, give or take the bytes of a rune cut off at its start.
func fullTail(tail string) bool { return len(tail) > wire.StdoutTailMax-utf8.UTFMax }

// NewOutputAt finds where the new output starts in cur, the tail read
// after prev: ok is false when the two do not overlap. A tail that is not
// full is the whole output so far: cur must then start with prev, and so
// must a full cur after a prev that was not (its new bytes are at least
// those past len(prev)), unless it slid past prev's start. Between two
// full tails the largest overlap wins: prev found whole in cur (no new
// output), else the longest end of prev that cur starts with, of at least
// minOverlap bytes. Output that repeats itself exactly within a tail may
// so be taken for less new output than came.
func NewOutputAt(prev, cur string) (int, bool) {
	if strings.HasPrefix(cur, prev) && (!fullTail(prev) || !fullTail(cur)) {
		return len(prev), true
	}
	if !fullTail(cur) {
		return 0, false
	}
	if fullTail(prev) {
		if i := strings.LastIndex(cur, prev); i >= 0 {
			return i + len(prev), true
		}
	}
	for k := min(len(prev), len(cur)) - 1; k >= minOverlap; k-- {
		if strings.HasSuffix(prev, cur[:k]) {
			return k, true
		}
	}
	return 0, false
}

// FollowInvocation looks at an invocation every `every` (FollowEvery when
// not positive) and writes to out the new bytes of its stdout_tail as they
// arrive (TailFollower), until it reaches a terminal state; it returns the
// invocation as it ended. The tail is refreshed only by its daemon's
// polls, and output written after its last poll before the end is not in
// it (the daemon log has all of it).
func (c *Client) FollowInvocation(ctx context.Context, id string, every time.Duration, out io.Writer) (operator.Invocation, error) {
	if every <= 0 {
		every = FollowEvery
	}
	var f TailFollower
	for {
		inv, err := c.Invocation(ctx, id)
		if err != nil {
			return inv, err
		}
		s := f.Next(inv.StdoutTail)
		if terminal(inv.State) {
			s += f.End()
		}
		if s != "" {
			if _, err := io.WriteString(out, s); err != nil {
				return inv, fmt.Errorf("opclient: write output of invocation %s: %w", id, err)
			}
		}
		if terminal(inv.State) {
			return inv, nil
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return inv, ctx.Err()
		case <-t.C:
		}
	}
}
