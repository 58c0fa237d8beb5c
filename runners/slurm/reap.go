package slurm

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/nymphd/nymph/runners"
)

// jobIDPattern is what a job id file holds (a job id, an array task
// "N_M" included); anything else is never handed to scancel.
var jobIDPattern = regexp.MustCompile(`^[0-9]+(_[0-9]+)?$`)

// Leftovers implements runners.Reaper: a slurm.jobid still present at the
// next start names the job of a run whose daemon was killed outright
// while following it. Nothing collects that job's result any more, so it
// is cancelled (scancel; a job that ended already costs nothing) and the
// file removed.
func (r *Runner) Leftovers() runners.Leftovers {
	return runners.Leftovers{File: JobIDFile, Noun: "slurm job", Stop: r.cancelLeftover}
}

func (r *Runner) cancelLeftover(ctx context.Context, workdir, id string) error {
	if !jobIDPattern.MatchString(id) {
		return fmt.Errorf("%w: not a slurm job id", runners.ErrNotALeftover)
	}
	switch _, err := r.command(ctx, workdir, r.opt.Scancel, id); {
	case errors.Is(err, errUnknownJob):
		return runners.ErrLeftoverGone // ended and forgotten by slurmctld
	case err != nil:
		return err
	}
	return nil
}
