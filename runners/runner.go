// Package runners defines what a runner is — something that carries one
// `run` invocation to completion in its workdir — and the workdir contract
// every kind shares (spec 003, "Shared workdir contract"). Each kind lives
// in its own sub-package: process, docker (also gvisor), slurm, kube.
//
// It decides how a kind is resolved (alias, default, unknown) and how an
// outcome is read from the workdir. It does not decide when to run or when
// to cancel: the daemon core does, through the context it passes in.
package runners

import (
	"context"
	"log/slog"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Invocation is one run handed to a runner.
type Invocation struct {
	Run wire.Run
	// Workdir is {[runtime] workdir}/{invocation_id}, already created, with
	// args.msgpack written.
	Workdir string
	// Entry is the argv of the entry program ([runtime] entry); container
	// runners use their own default (python -m …) unless configured.
	Entry []string
	Log   *slog.Logger
}

// Outcome is the terminal result of an invocation, ready to become an Ack.
type Outcome struct {
	State      string // wire.StateSucceeded, wire.StateFailed or wire.StateKilled
	ResultBlob []byte
	Error      *wire.ErrorInfo
}

// Runner runs invocations of one kind. Run blocks until the invocation ends.
// Cancelling ctx means the daemon's shutdown grace expired: the runner stops
// its child (SIGTERM, then SIGKILL; docker stop; scancel; kubectl delete)
// and returns StateKilled.
type Runner interface {
	Kind() string
	Run(ctx context.Context, inv Invocation) Outcome
}
