package runners

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"time"

	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/hostio/procgroup"
	"github.com/nymphd/nymph/wirecore/wire"
)

// ErrKilled is a child stopped because its context ended: the daemon's
// shutdown grace expired.
var ErrKilled = errors.New("killed at shutdown")

// ClientWaitDelay bounds how long a cancelled client command (sbatch,
// squeue, kubectl, docker login or rm) is waited for once it is killed:
// something it started that keeps its output open (a wrapper's
// grandchild, a credential plugin) would otherwise hold the cancel until
// it ends by itself.
const ClientWaitDelay = 5 * time.Second

// StopTimeout bounds a command that stops a job or a container
// (docker stop waits 10 s itself before its SIGKILL): one that hangs (a
// wedged dockerd) fails, its record kept for the next start, rather than
// hold the run, and with it the daemon's drain, for good.
const StopTimeout = 30 * time.Second

// Child is a program a runner runs to its end (an entry program, a script,
// a docker client) with its stdout and stderr carried into the daemon log
// (and into Tail).
type Child struct {
	// Cmd is set up (argv, Env, Dir) but not started; Run sets its
	// SysProcAttr, Stdout and Stderr.
	Cmd *exec.Cmd
	Log *slog.Logger
	// Name and Spawn word the errors: "<Name>: spawn <Spawn>: …".
	Name, Spawn string
	// KillGrace is procgroup.WaitOrStop's; DrainGrace bounds the wait for
	// the output once the child ended (OutputLog.Drain).
	KillGrace, DrainGrace time.Duration
	// Started, when set, is called once the child runs; OnStop, when set,
	// when ctx ends, before the process group is signalled.
	Started, OnStop func()
	// PIDs, when set, holds a PID file for the child while it runs, so a
	// daemon killed outright stops its group at the next start (Reap).
	PIDs *childpids.Dir
	// Tail, when set, receives the child's stdout and stderr as they come
	// (OutputLog.Feed): the run's stdout_tail.
	Tail *Tail
}

// Run starts the child as the leader of its own process group (so a stop
// reaches its children, and it dies with the daemon) and waits for it.
// exited is nil for exit 0, else the *exec.ExitError ("exit status N",
// "signal: …"); err is ErrKilled when ctx ended first, else a failure to
// open the pipes, to spawn or to wait.
func (c Child) Run(ctx context.Context) (exited, err error) {
	cmd := c.Cmd
	cmd.SysProcAttr = procgroup.Attr()
	out, err := NewOutputLog(c.Log)
	if err != nil {
		return nil, fmt.Errorf("%s: pipe: %w", c.Name, err)
	}
	defer out.Close()
	out.Feed(c.Tail)
	cmd.Stdout, cmd.Stderr = out.Stdout(), out.Stderr()
	err = cmd.Start()
	out.CloseChildEnds()
	if err != nil {
		return nil, fmt.Errorf("%s: spawn %s: %w", c.Name, c.Spawn, err)
	}
	logged := out.Start()
	forget := c.record(cmd.Process.Pid)
	if c.Started != nil {
		c.Started()
	}
	stopped, exited := procgroup.WaitOrStop(ctx, cmd, c.KillGrace, c.OnStop)
	forget()
	out.Drain(logged, c.DrainGrace)
	if stopped {
		return nil, ErrKilled
	}
	var ee *exec.ExitError
	if exited != nil && !errors.As(exited, &ee) {
		return nil, fmt.Errorf("%s: wait: %w", c.Name, exited)
	}
	return exited, nil
}

// record writes the child's PID file when c.PIDs is set; the returned
// func removes it, once the child is reaped. A file that cannot be written
// is logged and the child runs on: it only matters if the daemon dies.
func (c Child) record(pid int) (forget func()) {
	remove, err := c.PIDs.Add(pid)
	if err != nil {
		c.logger().Warn(c.Name+": child runs without a PID file; a daemon killed outright would leave its group", "pid", pid, "err", err)
	}
	return func() {
		if err := remove(); err != nil {
			c.logger().Warn(c.Name+": PID file left behind", "pid", pid, "err", err)
		}
	}
}

func (c Child) logger() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

// Unfinished is the outcome of a child that did not run to its end, as Run
// reports it: killed for ErrKilled, else failed with the daemon's error
// type. It is false when err is nil: then how the child ended decides.
func Unfinished(err error) (Outcome, bool) {
	switch {
	case err == nil:
		return Outcome{}, false
	case errors.Is(err, ErrKilled):
		return Killed(), true
	}
	return Failed(wire.ErrTypeDaemon, err.Error()), true
}
