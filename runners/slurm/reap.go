package slurm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nymphd/nymph/runners"
)

// jobIDPattern is what a job id file holds (a job id, an array task
// "N_M" included); anything else is never handed to scancel.
var jobIDPattern = regexp.MustCompile(`^[0-9]+(_[0-9]+)?$`)

// Reap implements runners.Reaper: every root/*/slurm.jobid still present
// names the job of a run whose daemon was killed outright while following
// it. Nothing collects that job's result any more, so it is cancelled
// (scancel; a job that ended already costs nothing) and the file removed.
func (r *Runner) Reap(ctx context.Context, root string, log *slog.Logger) {
	runners.EachLeftover(ctx, root, JobIDFile, func(ctx context.Context, f string) { r.reapJob(ctx, f, log) })
}

func (r *Runner) reapJob(ctx context.Context, f string, log *slog.Logger) {
	b, err := os.ReadFile(f)
	id := strings.TrimSpace(string(b))
	switch {
	case err != nil:
		log.Warn("leftover slurm job id unreadable", "file", f, "err", err)
		return
	case !jobIDPattern.MatchString(id):
		log.Warn("leftover slurm job id file does not hold a job id; left as it is", "file", f)
		return
	}
	switch _, err := r.command(ctx, filepath.Dir(f), r.opt.Scancel, id); {
	case errors.Is(err, errUnknownJob):
		// Ended and forgotten by slurmctld already.
	case err != nil:
		log.Warn("slurm job of an earlier daemon's run not cancelled", "slurm_job", id, "err", err)
		return // kept, so the next start tries again
	default:
		log.Warn("slurm job of an earlier daemon's run cancelled", "slurm_job", id, "workdir", filepath.Dir(f))
	}
	if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
		log.Warn("leftover slurm job id file not removed", "file", f, "err", err)
	}
}
