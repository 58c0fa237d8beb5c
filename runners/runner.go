// Package runners defines what a runner is — something that carries one
// `run` invocation to completion in its workdir — and the workdir contract
// every kind shares (docs/architecture.md, "How a daemon behaves": runners
// and the workdir contract). Each kind lives in its own sub-package:
// process, docker (also gvisor), slurm, kube.
//
// It decides which runner of those offered carries a kind, the default
// entry programs, and how an outcome is read from the workdir. It does not
// decide which kind a run gets (the daemon core resolves run_config.runner,
// with wire's kinds and aliases), nor when to run or when to cancel: the
// core does, through the context it passes in.
package runners

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"

	"github.com/nymphd/nymph/wirecore/wire"
)

// EntryModule is the Python module the default entry programs run: the
// entry module of the protocol's first implementation, kept so that its
// entry package works unchanged (docs/architecture.md, "Inherited names").
const EntryModule = "dreamlake.lakeshore.daemon.entry"

// DefaultEntry is the host's entry program when [runtime] entry is unset.
var DefaultEntry = []string{"python3", "-m", EntryModule}

// DefaultContainerEntry is the entry program inside a container or Pod
// (docker, gvisor, kube) when [runtime] container_entry is unset: images
// ship `python`, not the host's `python3`.
var DefaultContainerEntry = []string{"python", "-m", EntryModule}

// Invocation is one run handed to a runner.
type Invocation struct {
	Run wire.Run
	// Workdir is {[runtime] workdir}/{invocation_id}, already created, with
	// args.msgpack written.
	Workdir string
	// Entry is the argv of the entry program ([runtime] entry); container
	// runners use DefaultContainerEntry unless configured.
	Entry []string
	Log   *slog.Logger
	// Tail, when set, is where the runner puts the run's output while it
	// runs (the last TailMax bytes of stdout and stderr, interleaved as
	// produced): from the child's pipes (process, docker, gvisor), or
	// refreshed from the job's output file (slurm) or the Pod's log
	// (kube) at each look at the job. Nil keeps none (a nil *Tail takes
	// every write).
	Tail *Tail
}

// Logger is inv.Log, or a logger that discards when it is nil.
func (inv Invocation) Logger() *slog.Logger {
	if inv.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return inv.Log
}

// Outcome is the terminal result of an invocation, ready to become an Ack.
type Outcome struct {
	State      string // wire.StateSucceeded, wire.StateFailed or wire.StateKilled
	ResultBlob []byte
	Error      *wire.ErrorInfo
	// ExitCode is the exit status of a script that exited non-zero (a
	// setup reports it); nil when the runner knows none: success, a
	// signal, an entry program judged by its workdir, a remote job.
	ExitCode *int
}

// ScriptExited is the outcome of a script that exited with code, not 0:
// failed, ScriptFailed "exit status N", and the code itself in ExitCode.
func ScriptExited(code int) Outcome {
	o := Failed(wire.ErrTypeScriptFailed, "exit status "+strconv.Itoa(code))
	o.ExitCode = &code
	return o
}

// ScriptFailed is the outcome of a script that did not exit 0, from what
// its Wait returned: ScriptExited for an exit status, else ScriptFailed
// with how it ended ("signal: killed") and no exit code.
func ScriptFailed(exited error) Outcome {
	if ee, ok := errors.AsType[*exec.ExitError](exited); ok && ee.Exited() {
		return ScriptExited(ee.ExitCode())
	}
	return Failed(wire.ErrTypeScriptFailed, exited.Error())
}

// ScriptArgv is the command line of a run's script on every runner,
// inside a container or Pod too: `bash -c <script>` (spec 003).
func ScriptArgv(script string) []string { return []string{"bash", "-c", script} }

// ShellQuote quotes s for a POSIX shell: in single quotes, each quote in
// it closed, escaped and reopened.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ScriptDone decides a script by its exit status alone: exit 0 succeeded
// with an empty result (there is no result.msgpack contract for a script),
// anything else as ScriptFailed says.
func ScriptDone(exited error) Outcome {
	if exited == nil {
		return Outcome{State: wire.StateSucceeded}
	}
	return ScriptFailed(exited)
}

// Runner runs invocations of one kind. Run blocks until the invocation ends.
// Cancelling ctx means the daemon's shutdown grace expired: the runner stops
// its child (SIGTERM, then SIGKILL; docker stop; scancel; kubectl delete)
// and returns StateKilled.
type Runner interface {
	Kind() string
	Run(ctx context.Context, inv Invocation) Outcome
}
