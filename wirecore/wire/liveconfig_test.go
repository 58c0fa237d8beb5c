package wire_test

import (
	"math"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// retry_min_s may equal retry_max_s (a constant backoff) but not pass it;
// a NaN is left to the per-value range checks, which name its key.
func TestRetryBoundsOrdered(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		minS, maxS float64
		want       bool
	}{
		{1, 60, true},
		{5, 5, true},
		{0.5, 0.25, false},
		{10, 2, false},
		{nan, 1, true},
		{1, nan, true},
	} {
		if got := wire.RetryBoundsOrdered(tc.minS, tc.maxS); got != tc.want {
			t.Errorf("RetryBoundsOrdered(%v, %v) = %v, want %v", tc.minS, tc.maxS, got, tc.want)
		}
	}
}
