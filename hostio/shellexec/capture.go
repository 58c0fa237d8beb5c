package shellexec

import (
	"strings"
	"unicode/utf8"

	"github.com/nymphd/nymph/wirecore/wire"
)

// capture keeps the first MaxCapture bytes of each stream and notes which
// stream had more. Only the exec's own goroutine uses it.
type capture struct {
	buf       [2][]byte
	truncated [2]bool
}

// stopping changes nothing: a capture never blocks.
func (c *capture) stopping() {}

func (c *capture) write(stream int, p []byte) {
	room := MaxCapture - len(c.buf[stream])
	if len(p) > room {
		p = p[:room]
		c.truncated[stream] = true
	}
	c.buf[stream] = append(c.buf[stream], p...)
}

func (c *capture) truncation() string {
	switch {
	case c.truncated[streamStdout] && c.truncated[streamStderr]:
		return wire.TruncatedBoth
	case c.truncated[streamStdout]:
		return wire.TruncatedStdout
	case c.truncated[streamStderr]:
		return wire.TruncatedStderr
	}
	return ""
}

// lossyString converts b to a string the way Rust's String::from_utf8_lossy
// does: each maximal ill-formed subsequence becomes one U+FFFD. (Go's
// strings.ToValidUTF8 folds a whole run of bad bytes into one, and
// utf8.DecodeRune rejects byte by byte; neither matches.)
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 16)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			sb.WriteByte(b[i])
			i++
			continue
		}
		if r, n := utf8.DecodeRune(b[i:]); r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidLen(b[i:])
	}
	return sb.String()
}

// invalidLen is the length of the maximal prefix of b that could start a
// well-formed sequence but does not complete one (at least 1), following
// Unicode's "substitution of maximal subparts", as Rust does.
func invalidLen(b []byte) int {
	width, lo, hi := leadInfo(b[0])
	if width == 0 {
		return 1
	}
	n := 1
	for ; n < width && n < len(b); n++ {
		c := b[n]
		if n == 1 && (c < lo || c > hi) {
			return 1
		}
		if n > 1 && (c < 0x80 || c > 0xBF) {
			return n
		}
	}
	return n
}

// leadInfo returns the sequence width a lead byte announces and the range
// its second byte must fall in; width 0 means the byte never starts one.
func leadInfo(c byte) (width int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}
