package runners

import (
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// DefaultMinPollInterval is the floor of a job-polling runner's interval
// when its options leave it at zero.
const DefaultMinPollInterval = 100 * time.Millisecond

// PollInterval is how often a runner that follows a job (slurm, kube)
// looks at it: the run_config's poll_interval_s when set and positive,
// else def, and never below floor (DefaultMinPollInterval when floor is
// not positive, as a runner's options leave it).
func PollInterval(pollIntervalS *wire.Number, def, floor time.Duration) time.Duration {
	if floor <= 0 {
		floor = DefaultMinPollInterval
	}
	d := def
	if pollIntervalS != nil && *pollIntervalS > 0 {
		d = time.Duration(float64(*pollIntervalS) * float64(time.Second))
	}
	return max(d, floor)
}
