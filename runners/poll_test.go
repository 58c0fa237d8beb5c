package runners

import (
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

func TestPollInterval(t *testing.T) {
	f := func(v float64) *wire.Number { x := wire.Number(v); return &x }
	for _, tc := range []struct {
		s    *wire.Number
		want time.Duration
	}{
		{nil, 5 * time.Second},
		{f(0), 5 * time.Second},
		{f(-1), 5 * time.Second},
		{f(0.5), 500 * time.Millisecond},
		{f(0.01), 100 * time.Millisecond}, // the floor
	} {
		if got := PollInterval(tc.s, 5*time.Second, DefaultMinPollInterval); got != tc.want {
			t.Errorf("PollInterval(%v) = %v, want %v", tc.s, got, tc.want)
		}
	}
	// Options that leave the floor at zero get the default one.
	if got := PollInterval(f(0.01), 5*time.Second, 0); got != DefaultMinPollInterval {
		t.Errorf("PollInterval with no floor = %v, want %v", got, DefaultMinPollInterval)
	}
}
