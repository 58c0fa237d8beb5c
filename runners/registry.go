package runners

import (
	"context"
	"fmt"
	"log/slog"
	"os/user"
	"sort"
	"strconv"

	"github.com/nymphd/nymph/wirecore/wire"
)

// The runner kinds, as the runners name them; wire's constants are their
// home. KindSubprocess is an alias of KindProcess; KindMock exists only in
// builds with the nymph_mock tag.
const (
	KindProcess    = wire.RunnerProcess
	KindSubprocess = wire.RunnerSubprocess
	KindDocker     = wire.RunnerDocker
	KindGVisor     = wire.RunnerGVisor
	KindSlurm      = wire.RunnerSlurm
	KindKube       = wire.RunnerKube
	KindMock       = wire.RunnerMock
)

// Canonical resolves a runner name to its kind (wire.RunnerKind). ok is
// false for a name that is no kind, and for mock in a build without it.
func Canonical(name string) (kind string, ok bool) {
	kind, ok = wire.RunnerKind(name)
	if kind == KindMock {
		ok = mockBuilt
	}
	return kind, ok
}

// Config is what a Registry needs from the daemon's configuration.
type Config struct {
	// Root is [runtime] workdir, the parent of every invocation workdir.
	Root string
	// Entry is [runtime] entry; empty means DefaultEntry.
	Entry []string
	Log   *slog.Logger
}

// Registry holds the runners this daemon offers and carries a run through
// the workdir contract: find the kind's runner, prepare the workdir, run,
// and delete or keep the workdir.
type Registry struct {
	cfg     Config
	runners map[string]Runner
}

// NewRegistry offers the given runners; a later runner of the same kind
// replaces an earlier one.
func NewRegistry(cfg Config, offered ...Runner) *Registry {
	if len(cfg.Entry) == 0 {
		cfg.Entry = DefaultEntry
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{cfg: cfg, runners: map[string]Runner{}}
	for _, rn := range offered {
		r.runners[rn.Kind()] = rn
	}
	return r
}

// Reap has every offered Reaper stop what an earlier daemon's runs left
// under the registry's root, in kind order, all under one ReapTimeout.
// Each record file is swept once: the docker and gvisor runners leave the
// same container.cid, and the first of them stops what it names.
func (r *Registry) Reap(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, ReapTimeout)
	defer cancel()
	swept := map[string]bool{}
	for _, k := range r.Kinds() {
		rp, ok := r.runners[k].(Reaper)
		if !ok {
			continue
		}
		l := rp.Leftovers()
		if swept[l.File] {
			continue
		}
		swept[l.File] = true
		reapLeftovers(ctx, r.cfg.Root, l, r.cfg.Log)
	}
}

// Kinds lists the kinds offered, sorted.
func (r *Registry) Kinds() []string {
	kinds := make([]string, 0, len(r.runners))
	for k := range r.runners {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// Lookup returns the runner of kind, a kind already resolved (no default,
// no alias); one this registry does not offer is RunnerUnavailable.
func (r *Registry) Lookup(kind string) (Runner, *wire.ErrorInfo) {
	rn, ok := r.runners[kind]
	if !ok {
		return nil, &wire.ErrorInfo{TypeName: wire.ErrTypeRunnerUnavailable,
			Message: fmt.Sprintf("runner kind %s is not offered by this daemon", kind)}
	}
	return rn, nil
}

// ExecuteAs runs one invocation in {root}/{dir} ({root}/{invocation_id}
// when dir is empty) with the runner of kind, the kind the daemon core
// resolved (StartRun.Kind; the process runner for a setup, whose dir is
// `_setup-{command id}`): run_config.runner is not read again, and the
// registry never resolves a default or an alias itself. It blocks until
// the invocation ends; cancelling ctx kills it (StateKilled).
func (r *Registry) ExecuteAs(ctx context.Context, kind string, run wire.Run, dir string) Outcome {
	return r.Execute(ctx, Execution{Kind: kind, Run: run, Dir: dir})
}

// ExecuteWithArgs is ExecuteAs with args.msgpack copied from the file
// argsFile (a payload_ref the daemon resolved) instead of run.ArgsBlob;
// an empty argsFile is ExecuteAs.
func (r *Registry) ExecuteWithArgs(ctx context.Context, kind string, run wire.Run, dir, argsFile string) Outcome {
	return r.Execute(ctx, Execution{Kind: kind, Run: run, Dir: dir, ArgsFile: argsFile})
}

// Execution is one run as Execute carries it: ExecuteAs's and
// ExecuteWithArgs's arguments, and the Tail its output goes to.
type Execution struct {
	// Kind is the runner kind the daemon core resolved.
	Kind string
	Run  wire.Run
	// Dir is the workdir's name under the root; empty is the run's
	// invocation_id.
	Dir string
	// ArgsFile, when set, is the file args.msgpack is copied from
	// instead of Run.ArgsBlob.
	ArgsFile string
	// Tail, when set, receives the run's output while it runs
	// (Invocation.Tail): the daemon reports it as the run's stdout_tail.
	Tail *Tail
}

// Execute runs one invocation as ExecuteAs does, with everything e says.
func (r *Registry) Execute(ctx context.Context, e Execution) Outcome {
	dir := e.Dir
	if dir == "" {
		dir = e.Run.InvocationID
	}
	rn, refused := r.Lookup(e.Kind)
	if refused != nil {
		return r.refuse(e.Run, refused)
	}
	return r.execute(ctx, rn, e.Run, dir, Args{Blob: e.Run.ArgsBlob, File: e.ArgsFile}, e.Tail)
}

// refuse fails a run no runner was found for, before any workdir exists.
func (r *Registry) refuse(run wire.Run, why *wire.ErrorInfo) Outcome {
	r.cfg.Log.Warn("run refused", "invocation_id", run.InvocationID, "type", why.TypeName, "message", why.Message)
	return Outcome{State: wire.StateFailed, Error: why}
}

// execute carries a run through the workdir contract with rn.
func (r *Registry) execute(ctx context.Context, rn Runner, run wire.Run, dir string, args Args, tail *Tail) Outcome {
	log := r.cfg.Log.With("invocation_id", run.InvocationID)
	owner, err := ownerOf(run.AsUser)
	if err != nil {
		return Failed(wire.ErrTypeDaemon, err.Error())
	}
	workdir, err := PrepareWorkdirArgs(r.cfg.Root, dir, args, owner)
	if err != nil {
		return Failed(wire.ErrTypeDaemon, err.Error())
	}
	o := rn.Run(ctx, Invocation{Run: run, Workdir: workdir, Entry: r.cfg.Entry,
		Log: log.With("runner", rn.Kind()), Tail: tail})
	FinishWorkdir(workdir, o, log)
	return o
}

// ownerOf looks up as_user, so its workdir can be handed to it. Root (or
// no as_user) keeps the daemon's ownership.
func ownerOf(asUser *string) (*Owner, error) {
	if asUser == nil || *asUser == "" {
		return nil, nil
	}
	u, err := user.Lookup(*asUser)
	if err != nil {
		return nil, fmt.Errorf("runners: as_user %q: %w", *asUser, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("runners: as_user %q: uid %q: %w", *asUser, u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("runners: as_user %q: gid %q: %w", *asUser, u.Gid, err)
	}
	if uid == 0 {
		return nil, nil
	}
	return &Owner{UID: uid, GID: gid}, nil
}
