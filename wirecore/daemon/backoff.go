package daemon

import "time"

// backoff is the poll (and hello) retry schedule (docs/architecture.md,
// "How a daemon behaves"; docs/protocol.md leaves it to the daemon): a
// failed attempt waits base + rand(0,1)·min(base, 5) seconds, then the
// base doubles up to the cap; a success resets the base to the minimum.
type backoff struct {
	min, max float64
	base     float64
}

func newBackoff(minS, maxS float64) backoff {
	return backoff{min: minS, max: maxS, base: minS}
}

// reconfigure takes new bounds; the base stays within them.
func (b *backoff) reconfigure(minS, maxS float64) {
	b.min, b.max = minS, maxS
	b.base = min(max(b.base, minS), maxS)
}

// next returns the wait before the next attempt and advances the base.
// The jitter is full (drawn from [0, min(base, 5))), so a fleet that lost
// the control plane together does not come back in lockstep.
func (b *backoff) next(jitter float64) time.Duration {
	wait := b.base + jitter*min(b.base, 5.0)
	b.base = min(b.base*2, b.max)
	return seconds(wait)
}

func (b *backoff) reset() { b.base = b.min }

// seconds converts a float number of seconds to a Duration, rounded to the
// nanosecond.
func seconds(s float64) time.Duration {
	return time.Duration(s*float64(time.Second) + 0.5)
}
