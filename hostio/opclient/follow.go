package opclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// logsWait is how long one logs long-poll may be held by the server.
const logsWait = 15 * time.Second

// Exit statuses ctl uses for an exec that did not run to a normal exit.
const (
	ExitTimedOut  = 124 // the remote exec ran past its timeout (-2), as timeout(1)
	ExitNotRun    = 125 // the remote exec could not run or was cancelled (-1)
	ExitAbnormal  = 1   // any other exit code that does not fit a process status
	ExitLocalFail = 1   // ctl itself failed: network, server error
)

// FollowLogs copies an exec's streamed output to out from offset, using
// the logs long-poll, until the server says the exec is done and every
// chunk is in. It returns the offset reached, so a caller interrupted by
// ctx can say where to resume.
func (c *Client) FollowLogs(ctx context.Context, execID string, offset int64, out io.Writer) (int64, error) {
	for {
		page, err := c.Logs(ctx, execID, offset, logsWait)
		if err != nil {
			return offset, err
		}
		if len(page.Data) > 0 {
			if _, err := out.Write(page.Data); err != nil {
				return offset, fmt.Errorf("opclient: write logs of %s: %w", execID, err)
			}
		}
		if page.NextOffset > offset {
			offset = page.NextOffset
		}
		if page.Done && len(page.Data) == 0 {
			return offset, nil
		}
	}
}

// DumpLogs copies what the exec has streamed so far, without waiting.
func (c *Client) DumpLogs(ctx context.Context, execID string, out io.Writer) (operator.LogsPage, error) {
	var offset int64
	for {
		page, err := c.Logs(ctx, execID, offset, 0)
		if err != nil {
			return page, err
		}
		if _, err := out.Write(page.Data); err != nil {
			return page, fmt.Errorf("opclient: write logs of %s: %w", execID, err)
		}
		if len(page.Data) == 0 || page.NextOffset <= offset {
			return page, nil
		}
		offset = page.NextOffset
	}
}

// ExecOutcome is how an exec ended, as ctl reports it.
type ExecOutcome struct {
	Result wire.ExecResult
	// Streamed is the number of log bytes copied while following.
	Streamed int64
}

// RunExec queues an exec, copies its streamed output (req.Stream) to
// stdout as it is produced, and returns its result. Without streamed bytes (a daemon
// that posted output in the result itself) the result's stdout and stderr
// are copied to stdout and stderr.
func (c *Client) RunExec(ctx context.Context, worker string, req operator.ExecRequest, stdout, stderr io.Writer) (operator.ExecAccepted, ExecOutcome, error) {
	acc, err := c.Exec(ctx, worker, req)
	if err != nil {
		return acc, ExecOutcome{}, err
	}
	out, err := c.FinishExec(ctx, acc.ExecID, stdout, stderr)
	return acc, out, err
}

// FinishExec follows an already queued exec to its result.
func (c *Client) FinishExec(ctx context.Context, execID string, stdout, stderr io.Writer) (ExecOutcome, error) {
	n, err := c.FollowLogs(ctx, execID, 0, stdout)
	if err != nil {
		return ExecOutcome{Streamed: n}, err
	}
	st, err := c.WaitExec(ctx, execID)
	if err != nil {
		return ExecOutcome{Streamed: n}, err
	}
	if n == 0 {
		io.WriteString(stdout, st.Result.Stdout)
		io.WriteString(stderr, st.Result.Stderr)
	}
	return ExecOutcome{Result: *st.Result, Streamed: n}, nil
}

// WaitExec fetches the exec status until its result is recorded. After a
// log stream that said done it normally takes one call.
func (c *Client) WaitExec(ctx context.Context, execID string) (operator.ExecStatus, error) {
	return pollUntil(ctx, func() (operator.ExecStatus, bool, error) {
		st, err := c.ExecStatus(ctx, execID)
		return st, err == nil && st.Result != nil, err
	})
}

// terminal invocation states.
func terminal(state string) bool {
	switch state {
	case wire.StateSucceeded, wire.StateFailed, wire.StateKilled:
		return true
	}
	return false
}

// WaitInvocation polls an invocation until it reaches a terminal state.
func (c *Client) WaitInvocation(ctx context.Context, id string) (operator.Invocation, error) {
	return pollUntil(ctx, func() (operator.Invocation, bool, error) {
		inv, err := c.Invocation(ctx, id)
		return inv, err == nil && terminal(inv.State), err
	})
}

// WaitWorker polls the worker list until one satisfies ok, and returns it.
// Transport errors are retried (the server may still be starting);
// operator errors are not.
func (c *Client) WaitWorker(ctx context.Context, ok func(operator.Worker) bool) (operator.Worker, error) {
	return pollUntil(ctx, func() (operator.Worker, bool, error) {
		ws, err := c.Workers(ctx)
		var ae *APIError
		if err != nil && !errors.As(err, &ae) {
			return operator.Worker{}, false, nil
		}
		if err != nil {
			return operator.Worker{}, false, err
		}
		for _, w := range ws {
			if ok(w) {
				return w, true, nil
			}
		}
		return operator.Worker{}, false, nil
	})
}

// pollUntil calls check with a growing pause (50 ms to 1 s) until it says
// done, fails, or ctx ends.
func pollUntil[T any](ctx context.Context, check func() (T, bool, error)) (T, error) {
	pause := 50 * time.Millisecond
	for {
		v, done, err := check()
		if err != nil || done {
			return v, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// ExitStatus maps a remote exec result to ctl's exit status, and a message
// for the sentinels and truncation (empty when there is nothing to say).
func ExitStatus(execID string, r wire.ExecResult) (int, string) {
	code := int64(r.ExitCode)
	var msg string
	status := int(code)
	switch {
	case code == wire.ExitTimeout:
		status, msg = ExitTimedOut, fmt.Sprintf("exec %s timed out and was killed", execID)
	case code == wire.ExitSpawnFailed:
		status, msg = ExitNotRun, fmt.Sprintf("exec %s could not run or was cancelled at shutdown", execID)
	case code < 0 || code > 255:
		status, msg = ExitAbnormal, fmt.Sprintf("exec %s ended with exit code %d", execID, code)
	}
	if r.Error != nil && *r.Error != "" {
		if msg != "" {
			msg += ": "
		} else {
			msg = fmt.Sprintf("exec %s: ", execID)
		}
		msg += *r.Error
	}
	return status, msg
}

// ResolveWorker turns what a user typed into a worker id: an exact id, or
// else the machine id or label of exactly one worker (a live one wins over
// a lost one with the same name). An unknown name is returned unchanged, so
// the server's own "unknown worker" answer reaches the user.
// The worker found is returned too (zero when the name is unknown).
func (c *Client) ResolveWorker(ctx context.Context, ref string) (string, operator.Worker, error) {
	ws, err := c.Workers(ctx)
	if err != nil {
		return "", operator.Worker{}, err
	}
	if w, ok := MatchWorker(ws, ref); ok {
		return w.ID, w, nil
	}
	var names []string
	for _, w := range ws {
		if w.MachineID == ref || w.Label == ref {
			names = append(names, w.ID)
		}
	}
	if len(names) > 1 {
		return "", operator.Worker{}, fmt.Errorf("opclient: %q names %d workers (%v); use an id", ref, len(names), names)
	}
	return ref, operator.Worker{}, nil
}

// MatchWorker finds the worker ref names: by id, else by machine id or
// label when exactly one worker (or exactly one that is not lost) has it.
func MatchWorker(ws []operator.Worker, ref string) (operator.Worker, bool) {
	return MatchWorkerPreferring(ws, ref, func(w operator.Worker) bool { return w.State != "lost" })
}

// MatchWorkerPreferring is MatchWorker with the tie-break given: by id,
// else by machine id or label when exactly one worker has it, or exactly
// one of those that prefer takes.
func MatchWorkerPreferring(ws []operator.Worker, ref string, prefer func(operator.Worker) bool) (operator.Worker, bool) {
	var named, preferred []operator.Worker
	for _, w := range ws {
		if w.ID == ref {
			return w, true
		}
		if w.MachineID == ref || w.Label == ref {
			named = append(named, w)
			if prefer(w) {
				preferred = append(preferred, w)
			}
		}
	}
	switch {
	case len(named) == 1:
		return named[0], true
	case len(preferred) == 1:
		return preferred[0], true
	}
	return operator.Worker{}, false
}
