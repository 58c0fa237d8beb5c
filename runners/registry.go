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

// The runner kinds of spec 003. KindSubprocess is an alias of KindProcess;
// KindMock exists only in builds with the nymph_mock tag.
const (
	KindProcess    = "process"
	KindSubprocess = "subprocess"
	KindDocker     = "docker"
	KindGVisor     = "gvisor"
	KindSlurm      = "slurm"
	KindKube       = "kube"
	KindMock       = "mock"
)

// DefaultEntry is the host entry program when [runtime] entry is unset.
var DefaultEntry = []string{"python3", "-m", "dreamlake.lakeshore.daemon.entry"}

// Canonical resolves an alias to its kind. ok is false for a kind this
// build does not know at all.
func Canonical(kind string) (canonical string, ok bool) {
	switch kind {
	case KindProcess, KindSubprocess:
		return KindProcess, true
	case KindDocker, KindGVisor, KindSlurm, KindKube:
		return kind, true
	case KindMock:
		return KindMock, mockBuilt
	}
	return "", false
}

// Config is what a Registry needs from the daemon's configuration.
type Config struct {
	// Root is [runtime] workdir, the parent of every invocation workdir.
	Root string
	// Default is [runtime] default_runner, used when run_config.runner is
	// empty.
	Default string
	// Entry is [runtime] entry; empty means DefaultEntry.
	Entry []string
	Log   *slog.Logger
}

// Registry holds the runners this daemon offers and carries a run through
// the workdir contract: resolve the kind, prepare the workdir, run, and
// delete or keep the workdir.
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

// Kinds lists the kinds offered, sorted.
func (r *Registry) Kinds() []string {
	kinds := make([]string, 0, len(r.runners))
	for k := range r.runners {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// Resolve picks the runner for a run_config.runner value: empty means the
// configured default; an alias resolves to its kind; an unknown kind is a
// DaemonError "unknown runner kind: …" (never a fallback to the default);
// a known kind this daemon does not offer is RunnerUnavailable.
func (r *Registry) Resolve(kind string) (Runner, *wire.ErrorInfo) {
	if kind == "" {
		kind = r.cfg.Default
	}
	canon, ok := Canonical(kind)
	if !ok {
		return nil, &wire.ErrorInfo{TypeName: wire.ErrTypeDaemon, Message: "unknown runner kind: " + kind}
	}
	rn, ok := r.runners[canon]
	if !ok {
		return nil, &wire.ErrorInfo{TypeName: wire.ErrTypeRunnerUnavailable,
			Message: fmt.Sprintf("runner kind %s is not offered by this daemon", kind)}
	}
	return rn, nil
}

// Execute runs one invocation in {root}/{invocation_id}.
func (r *Registry) Execute(ctx context.Context, run wire.Run) Outcome {
	return r.ExecuteIn(ctx, run, run.InvocationID)
}

// ExecuteIn runs one invocation in {root}/{dir}; setups use their own
// directory name (`_setup-{command id}`). It blocks until the invocation
// ends; cancelling ctx kills it (StateKilled).
func (r *Registry) ExecuteIn(ctx context.Context, run wire.Run, dir string) Outcome {
	log := r.cfg.Log.With("invocation_id", run.InvocationID)
	rn, errInfo := r.Resolve(run.RunConfig.Runner)
	if errInfo != nil {
		log.Warn("run refused", "type", errInfo.TypeName, "message", errInfo.Message)
		return Outcome{State: wire.StateFailed, Error: errInfo}
	}
	owner, err := ownerOf(run.AsUser)
	if err != nil {
		return Failed(wire.ErrTypeDaemon, err.Error())
	}
	workdir, err := PrepareWorkdir(r.cfg.Root, dir, run.ArgsBlob, owner)
	if err != nil {
		return Failed(wire.ErrTypeDaemon, err.Error())
	}
	o := rn.Run(ctx, Invocation{Run: run, Workdir: workdir, Entry: r.cfg.Entry, Log: log.With("runner", rn.Kind())})
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
