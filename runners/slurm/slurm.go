// Package slurm is the `slurm` runner: the entry program, or a run's
// script under `bash -c`, as a batch job, submitted with sbatch, followed
// with squeue, cancelled with scancel.
//
// It decides the job script, how the job id is read, how SLURM job states
// map to an outcome, and how a job is cancelled. It does not decide the
// outcome rule once the job has ended, nor the workdir's lifetime: package
// runners does, from result.msgpack and error.json in the shared workdir.
package slurm

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Defaults of run_config.slurm.
const (
	DefaultTime         = "01:00:00"
	DefaultPollInterval = 5 * time.Second
	ScriptFile          = "job.sbatch"
	OutputFile          = "slurm.out"
	// JobIDFile holds the id of the run's job while the daemon follows
	// it: one a daemon killed outright leaves names a job no daemon
	// follows any more, which the next one cancels (Leftovers).
	JobIDFile = "slurm.jobid"
	// StatusFile is where job.sbatch records a script's exit status: the
	// job's own state says only whether it was 0.
	StatusFile = "script.status"
)

// Options configures the runner.
type Options struct {
	// Sbatch, Squeue and Scancel are the client binaries; empty means the
	// plain names on PATH.
	Sbatch, Squeue, Scancel string
	// BaseEnv is the clients' environment; nil means os.Environ().
	BaseEnv []string
	// MinPollInterval bounds poll_interval_s from below; zero means 100 ms.
	MinPollInterval time.Duration
}

// Runner is the slurm runner.
type Runner struct{ opt Options }

// New returns a slurm runner.
func New(opt Options) *Runner {
	opt.Sbatch = cmp.Or(opt.Sbatch, "sbatch")
	opt.Squeue = cmp.Or(opt.Squeue, "squeue")
	opt.Scancel = cmp.Or(opt.Scancel, "scancel")
	if opt.BaseEnv == nil {
		opt.BaseEnv = os.Environ()
	}
	return &Runner{opt: opt}
}

// Kind implements runners.Runner.
func (r *Runner) Kind() string { return runners.KindSlurm }

// directiveSafe is what a value may look like on an #SBATCH line: sbatch
// reads those lines itself, so no whitespace, quotes or control bytes that
// could end the directive or start another.
var directiveSafe = regexp.MustCompile(`^[A-Za-z0-9_.:/=,+@%-]+$`)

// Script renders job.sbatch: the resource directives of run_config.slurm,
// the DREAMLAKE_* environment, and the entry program started in the
// workdir — or, for a run with a script, `bash -c <script>` there, its
// exit status written to StatusFile and made the job's.
func Script(inv runners.Invocation) (string, error) {
	cfg := inv.Run.RunConfig.Slurm
	if cfg == nil {
		cfg = &wire.SlurmConfig{}
	}
	timeLimit := cmp.Or(cfg.Time, DefaultTime)
	directives := [][2]string{
		{"job-name", "nymph-" + inv.Run.InvocationID},
		{"chdir", inv.Workdir},
		{"output", filepath.Join(inv.Workdir, OutputFile)},
		{"partition", cfg.Partition},
		{"time", timeLimit},
		{"gres", cfg.Gres},
		{"nodes", string(cfg.Nodes)},
		{"ntasks-per-node", string(cfg.NtasksPerNode)},
		{"cpus-per-task", string(cfg.CPUsPerTask)},
		{"mem", string(cfg.Mem)},
	}
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	for _, d := range directives {
		if d[1] == "" {
			continue
		}
		if !directiveSafe.MatchString(d[1]) {
			return "", fmt.Errorf("slurm runner: %s value %q cannot go on an #SBATCH line", d[0], d[1])
		}
		fmt.Fprintf(&b, "#SBATCH --%s=%s\n", d[0], d[1])
	}
	for _, kv := range runners.ChildEnv(inv.Run, inv.Workdir) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, runners.ShellQuote(v))
	}
	fmt.Fprintf(&b, "cd %s || exit 1\n", runners.ShellQuote(inv.Workdir))
	if inv.Run.Script != nil {
		for i, a := range runners.ScriptArgv(*inv.Run.Script) {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(runners.ShellQuote(a))
		}
		fmt.Fprintf(&b, "\nstatus=$?\necho \"$status\" > %s\nexit \"$status\"\n",
			runners.ShellQuote(filepath.Join(inv.Workdir, StatusFile)))
		return b.String(), nil
	}
	b.WriteString("exec")
	for _, a := range inv.Entry {
		b.WriteString(" " + runners.ShellQuote(a))
	}
	b.WriteString("\n")
	return b.String(), nil
}

var submitted = regexp.MustCompile(`Submitted batch job (\d+)`)

// ParseJobID reads the job id out of sbatch's "Submitted batch job N".
func ParseJobID(out string) (string, error) {
	m := submitted.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("slurm runner: no job id in sbatch output %q", strings.TrimSpace(out))
	}
	return m[1], nil
}

// Phase is where a job stands, as far as the runner cares.
type Phase int

// Phases of a job.
const (
	Active    Phase = iota // pending, running, completing, suspended, …
	Completed              // CD: the result/error files decide
	Failed                 // F, CA, TO and the other terminal failures
	Gone                   // not in the queue any more
)

// MapState maps one line of `squeue -o %T` (long names) or `%t` (short
// codes) to a Phase. Empty output means the job left the queue.
func MapState(state string) Phase {
	state = strings.TrimSpace(state)
	if i := strings.IndexAny(state, " \n"); i >= 0 {
		state = state[:i] // "CANCELLED by 0", several lines for arrays
	}
	switch state {
	case "":
		return Gone
	case "COMPLETED", "CD":
		return Completed
	case "FAILED", "F", "CANCELLED", "CA", "TIMEOUT", "TO", "NODE_FAIL", "NF",
		"OUT_OF_MEMORY", "OOM", "BOOT_FAIL", "BF", "DEADLINE", "DL",
		"PREEMPTED", "PR", "REVOKED", "RV", "SPECIAL_EXIT", "SE":
		return Failed
	}
	return Active
}

// SqueueArgv is the state query. `-t all` keeps ended jobs visible while
// slurmctld remembers them (MinJobAge), so COMPLETED and FAILED are seen
// instead of an empty line.
func SqueueArgv(jobID string) []string {
	return []string{"-j", jobID, "-h", "-o", "%T", "-t", "all"}
}

// Run implements runners.Runner.
func (r *Runner) Run(ctx context.Context, inv runners.Invocation) runners.Outcome {
	log := inv.Logger()
	script, err := Script(inv)
	if err != nil {
		return runners.Failed(wire.ErrTypeDaemon, err.Error())
	}
	path := filepath.Join(inv.Workdir, ScriptFile)
	// A redelivered run reuses its workdir: an old status must not decide.
	if err := os.Remove(filepath.Join(inv.Workdir, StatusFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return runners.Failed(wire.ErrTypeDaemon, fmt.Sprintf("slurm runner: clear %s: %v", StatusFile, err))
	}
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		return runners.Failed(wire.ErrTypeDaemon, fmt.Sprintf("slurm runner: write %s: %v", path, err))
	}
	out, err := r.command(ctx, inv.Workdir, r.opt.Sbatch, path)
	if err != nil && ctx.Err() != nil {
		// The job may have been submitted with its id never read: it is
		// cancelled by its name, which is this run's alone.
		name := "nymph-" + inv.Run.InvocationID
		if r.cancel("--name="+name, inv.Workdir, log) {
			log.Info("shutdown during sbatch; any job submitted was cancelled by its name", "job_name", name)
		}
		return runners.Killed()
	}
	if err != nil {
		return runners.Failed(wire.ErrTypeDaemon, "slurm runner: "+err.Error())
	}
	jobID, err := ParseJobID(out)
	if err != nil {
		return runners.Failed(wire.ErrTypeDaemon, err.Error())
	}
	log = log.With("slurm_job", jobID)
	log.Info("job submitted")
	release, err := runners.Follow(inv.Workdir, JobIDFile, jobID)
	if err != nil {
		log.Warn("job id not recorded; a daemon killed outright would leave the job running", "err", err)
	}
	o, running := r.follow(ctx, inv, jobID, log)
	if running {
		// scancel failed: the record stays, so the next start cancels the
		// job (runners.Leftovers) rather than forget it.
		log.Warn("job not cancelled; its record is kept for the next start", "file", JobIDFile)
	} else {
		release()
	}
	return o
}

func (r *Runner) pollInterval(inv runners.Invocation) time.Duration {
	var s *wire.Number
	if c := inv.Run.RunConfig.Slurm; c != nil {
		s = c.PollIntervalS
	}
	return runners.PollInterval(s, DefaultPollInterval, r.opt.MinPollInterval)
}

// follow polls the job until it ends or ctx is cancelled (then scancel),
// refreshing the run's Tail from its output file at each look.
func (r *Runner) follow(ctx context.Context, inv runners.Invocation, jobID string, log *slog.Logger) (o runners.Outcome, running bool) {
	tick := time.NewTicker(r.pollInterval(inv))
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return runners.Killed(), !r.cancel(jobID, inv.Workdir, log)
		case <-tick.C:
		}
		refreshTail(inv, log)
		state, err := r.state(ctx, inv.Workdir, jobID)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("squeue failed; will poll again", "err", err)
			}
			continue
		}
		if state != last {
			log.Info("job state", "state", state)
			last = state
		}
		if phase := MapState(state); phase != Active && inv.Run.Script != nil {
			return scriptOutcome(inv.Workdir, jobID, state), false
		}
		switch MapState(state) {
		case Completed:
			return runners.ReadOutcome(inv.Workdir, nil), false
		case Failed:
			return runners.ReadOutcome(inv.Workdir, fmt.Errorf("slurm job %s %s", jobID, state)), false
		case Gone:
			return gone(inv.Workdir, jobID), false
		}
	}
}

// refreshTail reads the end of the job's output file (slurm.out in the
// shared workdir: stdout and stderr, as the job writes them) into the
// run's Tail. A job not started yet has no file: nothing to show.
func refreshTail(inv runners.Invocation, log *slog.Logger) {
	if inv.Tail == nil {
		return
	}
	err := inv.Tail.ReadFileEnd(filepath.Join(inv.Workdir, OutputFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Debug("job output not read", "err", err)
	}
}

// gone decides a job that left the queue without a final state seen: the
// files decide, as for an entry that exited 0 if result.msgpack is there.
func gone(workdir, jobID string) runners.Outcome {
	if _, err := os.Stat(filepath.Join(workdir, runners.ResultFile)); err == nil {
		return runners.ReadOutcome(workdir, nil)
	}
	return runners.ReadOutcome(workdir, fmt.Errorf("slurm job %s left the queue without writing %s", jobID, runners.ResultFile))
}

// scriptOutcome decides a script's job once it ended (state is its last
// squeue state, empty when it left the queue): by the exit status the job
// wrote, else — the job ended before bash did (a time limit, a cancel, a
// node failure) — failed with the job's state.
func scriptOutcome(workdir, jobID, state string) runners.Outcome {
	b, err := os.ReadFile(filepath.Join(workdir, StatusFile))
	if err == nil {
		code, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		switch {
		case perr != nil:
			return runners.Failed(wire.ErrTypeDaemon, fmt.Sprintf("slurm runner: %s holds %q, not an exit status", StatusFile, b))
		case code == 0:
			return runners.Outcome{State: wire.StateSucceeded}
		}
		return runners.ScriptExited(code)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return runners.Failed(wire.ErrTypeDaemon, fmt.Sprintf("slurm runner: read %s: %v", StatusFile, err))
	}
	if state == "" {
		return runners.Failed(wire.ErrTypeScriptFailed, fmt.Sprintf("slurm job %s left the queue without writing %s", jobID, StatusFile))
	}
	return runners.Failed(wire.ErrTypeScriptFailed, fmt.Sprintf("slurm job %s %s before the script ended", jobID, state))
}

// errUnknownJob is squeue's answer for an id slurmctld no longer knows.
var errUnknownJob = errors.New("invalid job id")

// state runs squeue; an id slurmctld has forgotten reads as "" (gone).
func (r *Runner) state(ctx context.Context, dir, jobID string) (string, error) {
	out, err := r.command(ctx, dir, r.opt.Squeue, SqueueArgv(jobID)...)
	if errors.Is(err, errUnknownJob) {
		return "", nil
	}
	return strings.TrimSpace(out), err
}

// cancel runs scancel on job (an id, or --name=) and reports whether it
// did.
func (r *Runner) cancel(job, dir string, log *slog.Logger) bool {
	// ctx is already cancelled; scancel must still run.
	ctx, stop := context.WithTimeout(context.Background(), runners.StopTimeout)
	defer stop()
	if _, err := r.command(ctx, dir, r.opt.Scancel, job); err != nil {
		log.Warn("scancel failed", "job", job, "err", err)
		return false
	}
	log.Info("job cancelled")
	return true
}

// command runs one SLURM client and returns its stdout; a failure carries
// its arguments (the job id, the script) and its stderr.
func (r *Runner) command(ctx context.Context, dir, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = runners.ClientWaitDelay
	cmd.Dir = dir
	cmd.Env = r.opt.BaseEnv
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		call := filepath.Base(bin) + " " + strings.Join(args, " ")
		if strings.Contains(strings.ToLower(msg), "invalid job id") {
			return "", fmt.Errorf("%s: %w: %s", call, errUnknownJob, msg)
		}
		return "", fmt.Errorf("%s: %w: %s", call, err, msg)
	}
	return stdout.String(), nil
}
