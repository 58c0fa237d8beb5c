// Package process is the `process` runner (alias `subprocess`): the entry
// program, or a `script` under `bash -c`, as a child process on the host.
//
// It decides the child's argv (entry, script, as_user via runuser), its
// environment, cwd and stdio, and how it is stopped when the daemon's
// shutdown grace expires. It does not decide the outcome rule or the
// workdir's lifetime: package runners does.
package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Defaults used when Options leave a value at zero.
const (
	DefaultKillGrace = 5 * time.Second
	// DefaultDrainGrace is how long the child's output is still logged
	// after it exited, for grandchildren that keep the pipes open.
	DefaultDrainGrace = 2 * time.Second
)

// Options configures the runner.
type Options struct {
	// BaseEnv is the environment the DREAMLAKE_* variables are added to;
	// nil means os.Environ().
	BaseEnv []string
	// KillGrace is how long the process group has after SIGTERM before
	// SIGKILL. Zero means 5 s.
	KillGrace time.Duration
	// DrainGrace: see DefaultDrainGrace. Zero means the default.
	DrainGrace time.Duration
	// PIDs, when set, holds a PID file for each child while it runs
	// (runners.Child.PIDs); nil records none.
	PIDs *childpids.Dir
}

// Runner is the process runner.
type Runner struct{ opt Options }

// New returns a process runner.
func New(opt Options) *Runner {
	if opt.KillGrace <= 0 {
		opt.KillGrace = DefaultKillGrace
	}
	if opt.DrainGrace <= 0 {
		opt.DrainGrace = DefaultDrainGrace
	}
	return &Runner{opt: opt}
}

// Kind implements runners.Runner.
func (r *Runner) Kind() string { return runners.KindProcess }

// Argv is the command line of an invocation: `bash -c <script>` for a
// script, else the entry program; wrapped as `runuser -u <user> -- …` when
// as_user is set, the user name being its own argv element.
func Argv(run wire.Run, entry []string) []string {
	var argv []string
	if run.Script != nil {
		argv = runners.ScriptArgv(*run.Script)
	} else {
		argv = append([]string(nil), entry...)
	}
	if run.AsUser != nil && *run.AsUser != "" {
		argv = append([]string{"runuser", "-u", *run.AsUser, "--"}, argv...)
	}
	return argv
}

// Run implements runners.Runner.
func (r *Runner) Run(ctx context.Context, inv runners.Invocation) runners.Outcome {
	log := inv.Logger()
	argv := Argv(inv.Run, inv.Entry)
	if len(argv) == 0 {
		return runners.Failed(wire.ErrTypeDaemon, "process runner: empty entry program")
	}
	exited, err := r.runChild(ctx, inv, argv, log)
	if o, unfinished := runners.Unfinished(err); unfinished {
		return o
	}
	if inv.Run.Script != nil {
		return runners.ScriptDone(exited)
	}
	return runners.ReadOutcome(inv.Workdir, exited)
}

// runChild spawns argv and waits. exited is nil for exit 0, else the
// *exec.ExitError ("exit status N", "signal: …"); err is a spawn failure
// or runners.ErrKilled.
func (r *Runner) runChild(ctx context.Context, inv runners.Invocation, argv []string, log *slog.Logger) (exited, err error) {
	base := r.opt.BaseEnv
	if base == nil {
		base = os.Environ()
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = inv.Workdir
	cmd.Env = append(append([]string(nil), base...), runners.ChildEnv(inv.Run, inv.Workdir)...)
	// Stdin stays nil: /dev/null.
	exited, err = runners.Child{Cmd: cmd, Log: log, Name: "process runner",
		Spawn:     fmt.Sprintf("%q in %s", argv[0], inv.Workdir),
		KillGrace: r.opt.KillGrace, DrainGrace: r.opt.DrainGrace, PIDs: r.opt.PIDs, Tail: inv.Tail,
		Started: func() { log.Info("child started", "pid", cmd.Process.Pid, "argv0", argv[0]) },
		OnStop:  func() { log.Info("shutdown grace expired; stopping child", "pid", cmd.Process.Pid) },
	}.Run(ctx)
	if err == nil {
		log.Info("child ended", "status", cmd.ProcessState.String())
	}
	return exited, err
}
