package wire

import (
	"math"
	"time"
)

// ValidSHA256 reports whether s is a sha256 as an ota_update (and nymph
// ctl update) carries it: exactly 64 hex digits, either case. It is
// checked before anything is downloaded or queued.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// MaxEpochS is the latest epoch second EpochTime represents; a later one
// (a hibernate "until" far in the future) is clamped to it rather than
// overflowing time.Duration's nanoseconds. It is in the year 5138.
const MaxEpochS = 1e11

// EpochTime converts float epoch seconds (the wire's timestamps) to a time
// in UTC. NaN, zero and negative seconds are the epoch itself; seconds past
// MaxEpochS are MaxEpochS.
func EpochTime(s float64) time.Time {
	if math.IsNaN(s) || s <= 0 {
		return time.Unix(0, 0).UTC()
	}
	s = min(s, MaxEpochS)
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC()
}

// EpochSeconds converts t to float epoch seconds, to the microsecond; the
// zero time is 0.
func EpochSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMicro()) / 1e6
}
