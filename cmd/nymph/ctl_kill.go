package main

import (
	"context"
	"strconv"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
	"github.com/nymphd/nymph/hostio/opclient"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// ctlKill stops an invocation or an exec by id: queued work at once;
// running work by a cancel its daemon carries out (the cancel extension),
// reported killed with --reason; work whose daemon cannot be told is
// refused with why. With --wait it waits until the work has ended.
func ctlKill(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("kill")
	reason := fs.String("reason", "", "why: the daemon reports the work cancelled with it")
	wait := fs.Bool("wait", false, "wait until the work has ended")
	pos, _, st := c.prepare("kill", fs, args, 1, false)
	if st >= 0 {
		return st
	}
	id := pos[0]
	inv, err := c.client.Kill(ctx, id, *reason)
	if opclient.IsNotFound(err) {
		return c.killExec(ctx, id, *reason, *wait)
	}
	if err != nil {
		return c.fail(err)
	}
	if inv.State == plane.InvocationRunning {
		termtext.Fprintf(c.env.stdout, "invocation %s: cancel sent to worker %s\n", inv.ID, inv.WorkerID)
		if !*wait {
			return 0
		}
		if inv, err = c.client.WaitInvocation(ctx, id); err != nil {
			return c.fail(err)
		}
	}
	termtext.Fprintf(c.env.stdout, "invocation %s: %s\n", inv.ID, inv.State)
	return 0
}

// killExec is ctl kill of an exec id.
func (c *ctlRun) killExec(ctx context.Context, id, reason string, wait bool) int {
	ex, err := c.client.KillExec(ctx, id, reason)
	if err != nil {
		return c.fail(err)
	}
	if ex.State != plane.ExecFinished {
		termtext.Fprintf(c.env.stdout, "exec %s: cancel sent to worker %s\n", ex.ExecID, ex.WorkerID)
		if !wait {
			return 0
		}
		if ex, err = c.client.WaitExec(ctx, id); err != nil {
			return c.fail(err)
		}
	}
	termtext.Fprintf(c.env.stdout, "exec %s: finished%s\n", ex.ExecID, execEnd(ex))
	return 0
}

// execEnd words a finished exec's result.
func execEnd(ex operator.ExecStatus) string {
	r := ex.Result
	if r == nil {
		return ""
	}
	s := " with exit code " + strconv.FormatInt(int64(r.ExitCode), 10)
	if r.ExitCode == wire.ExitSpawnFailed && r.Error != nil {
		s += " (" + *r.Error + ")"
	}
	return s
}
