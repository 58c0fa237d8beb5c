// Package kube is the `kube` runner: the entry program, or a run's script
// under `bash -c`, in a Pod, created with `kubectl apply -f -`, followed by
// its phase, deleted on cancel.
//
// It decides the Pod manifest, the kubectl argv and how a Pod phase maps
// to an outcome. It does not decide the outcome rule once the Pod has
// ended, nor the workdir's lifetime: package runners does.
package kube

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// DefaultPollInterval is run_config.kube.poll_interval_s when unset.
const DefaultPollInterval = 5 * time.Second

// DefaultEntry is the in-Pod entry program: runners.DefaultContainerEntry.
var DefaultEntry = runners.DefaultContainerEntry

// Options configures the runner.
type Options struct {
	// Kubectl is the client binary; empty means "kubectl" on PATH.
	Kubectl string
	// Entry is the in-Pod entry argv; empty means DefaultEntry.
	Entry []string
	// BaseEnv is kubectl's environment (KUBECONFIG, …); nil means os.Environ().
	BaseEnv []string
	// MinPollInterval bounds poll_interval_s from below; zero means 100 ms.
	MinPollInterval time.Duration
}

// Runner is the kube runner.
type Runner struct{ opt Options }

// New returns a kube runner.
func New(opt Options) *Runner {
	opt.Kubectl = cmp.Or(opt.Kubectl, "kubectl")
	if len(opt.Entry) == 0 {
		opt.Entry = DefaultEntry
	}
	if opt.BaseEnv == nil {
		opt.BaseEnv = os.Environ()
	}
	return &Runner{opt: opt}
}

// Kind implements runners.Runner.
func (r *Runner) Kind() string { return runners.KindKube }

// Argv prefixes a kubectl verb with the context and namespace.
func Argv(cfg *wire.KubeConfig, verb ...string) []string {
	var argv []string
	if cfg != nil && cfg.Context != "" {
		argv = append(argv, "--context", cfg.Context)
	}
	argv = append(argv, "--namespace", Namespace(cfg))
	return append(argv, verb...)
}

// ApplyArgv creates the Pod; PhaseArgv, ExitCodeArgv, LogsArgv and
// DeleteArgv below are the other kubectl calls.
func ApplyArgv(cfg *wire.KubeConfig) []string { return Argv(cfg, "apply", "-f", "-") }

// PhaseArgv reads a Pod's phase.
func PhaseArgv(cfg *wire.KubeConfig, name string) []string {
	return Argv(cfg, "get", "pod", name, "-o", "jsonpath={.status.phase}")
}

// ExitCodeArgv reads the exit code of a Pod's ended container.
func ExitCodeArgv(cfg *wire.KubeConfig, name string) []string {
	return Argv(cfg, "get", "pod", name, "-o", "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}")
}

// LogLines is how many lines of a Pod's log each look reads (`kubectl
// logs --tail`): as many as a Tail keeps bytes, so the lines read always
// cover the last runners.TailMax bytes of the log (a line is at least its
// newline). What kubectl prints goes through a bounded Tail: the daemon
// keeps no more of it than that.
const LogLines = runners.TailMax

// LogsArgv reads the end of a Pod's log: its one container's stdout and
// stderr.
func LogsArgv(cfg *wire.KubeConfig, name string) []string {
	return Argv(cfg, "logs", name, "--tail="+strconv.Itoa(LogLines))
}

// DeleteArgv deletes a Pod.
func DeleteArgv(cfg *wire.KubeConfig, name string) []string {
	return Argv(cfg, "delete", "pod", name)
}

// Run implements runners.Runner.
func (r *Runner) Run(ctx context.Context, inv runners.Invocation) runners.Outcome {
	log := inv.Logger()
	cfg := inv.Run.RunConfig.Kube
	manifest, err := Manifest(inv, r.opt.Entry)
	if err != nil {
		return runners.Failed(wire.ErrTypeDaemon, err.Error())
	}
	// Kept beside the outputs, so a failed run shows what was applied.
	_ = os.WriteFile(filepath.Join(inv.Workdir, "pod.json"), manifest, 0o600)
	name := podOf(inv)
	log = log.With("pod", name)
	// Written before the apply (which may go through even if it fails)
	// and removed when the run returns: one a daemon killed outright
	// leaves names a Pod nobody follows, which the next daemon deletes.
	release, err := runners.Follow(inv.Workdir, PodRefFile, encodePodRef(cfg, name))
	if err != nil {
		log.Warn("pod not recorded; a daemon killed outright would leave it running", "err", err)
	}
	// A Pod that could not be deleted keeps its record, so the next start
	// deletes it (runners.Leftovers) rather than forget it.
	deleted := true
	defer func() {
		if deleted {
			release()
		} else {
			log.Warn("pod not deleted; its record is kept for the next start", "file", PodRefFile)
		}
	}()
	if _, err := r.kubectl(ctx, manifest, ApplyArgv(cfg)...); err != nil {
		if ctx.Err() != nil {
			deleted = r.delete(cfg, name, log) // the apply may have gone through
			return runners.Killed()
		}
		return runners.Failed(wire.ErrTypeDaemon, "kube runner: apply: "+err.Error())
	}
	log.Info("pod applied")
	o := r.follow(ctx, inv, name, log)
	if o.State == wire.StateSucceeded || o.State == wire.StateKilled {
		deleted = r.delete(cfg, name, log)
	}
	return o
}

func (r *Runner) pollInterval(cfg *wire.KubeConfig) time.Duration {
	var s *wire.Number
	if cfg != nil {
		s = cfg.PollIntervalS
	}
	return runners.PollInterval(s, DefaultPollInterval, r.opt.MinPollInterval)
}

// follow polls the phase until the Pod ends or ctx is cancelled; while it
// runs, each look also reads the end of its log into the run's Tail.
func (r *Runner) follow(ctx context.Context, inv runners.Invocation, name string, log *slog.Logger) runners.Outcome {
	cfg := inv.Run.RunConfig.Kube
	tick := time.NewTicker(r.pollInterval(cfg))
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return runners.Killed()
		case <-tick.C:
		}
		out, err := r.kubectl(ctx, nil, PhaseArgv(cfg, name)...)
		if errors.Is(err, errNotFound) {
			if inv.Run.Script != nil {
				return runners.Failed(wire.ErrTypeScriptFailed, fmt.Sprintf("pod %s is gone", name))
			}
			return runners.ReadOutcome(inv.Workdir, fmt.Errorf("pod %s is gone", name))
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("reading pod phase failed; will poll again", "err", err)
			}
			continue
		}
		phase := strings.TrimSpace(out)
		if phase != last {
			log.Info("pod phase", "phase", phase)
			last = phase
		}
		if phase == "Running" {
			r.refreshTail(ctx, inv, name, log)
		}
		if inv.Run.Script != nil && (phase == "Succeeded" || phase == "Failed") {
			return r.scriptOutcome(ctx, cfg, name, phase, log)
		}
		switch phase {
		case "Succeeded":
			return runners.ReadOutcome(inv.Workdir, nil)
		case "Failed":
			return runners.ReadOutcome(inv.Workdir, fmt.Errorf("pod %s phase Failed", name))
		}
	}
}

// scriptOutcome decides a script's Pod by its phase, and a failed one by
// its container's exit code when kubectl tells it.
func (r *Runner) scriptOutcome(ctx context.Context, cfg *wire.KubeConfig, name, phase string, log *slog.Logger) runners.Outcome {
	if phase == "Succeeded" {
		return runners.Outcome{State: wire.StateSucceeded}
	}
	out, err := r.kubectl(ctx, nil, ExitCodeArgv(cfg, name)...)
	if err == nil {
		if code, perr := strconv.Atoi(strings.TrimSpace(out)); perr == nil && code != 0 {
			return runners.ScriptExited(code)
		}
		err = fmt.Errorf("exit code %q", strings.TrimSpace(out))
	}
	log.Warn("no exit code for the failed pod", "err", err)
	return runners.Failed(wire.ErrTypeScriptFailed, fmt.Sprintf("pod %s phase Failed", name))
}

// delete removes the Pod: on cancel (spec), and after a success so
// finished Pods do not pile up. A failed Pod is kept, like its workdir.
// delete runs kubectl delete pod and reports whether it did.
func (r *Runner) delete(cfg *wire.KubeConfig, name string, log *slog.Logger) bool {
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	if _, err := r.kubectl(ctx, nil, DeleteArgv(cfg, name)...); err != nil {
		log.Warn("kubectl delete pod failed", "err", err)
		return false
	}
	return true
}

// refreshTail reads the end of the Pod's log (LogsArgv) into the run's
// Tail; a log kubectl cannot give (the container just started) leaves it
// as it was.
func (r *Runner) refreshTail(ctx context.Context, inv runners.Invocation, name string, log *slog.Logger) {
	if inv.Tail == nil {
		return
	}
	fresh := runners.NewTail()
	cmd := exec.CommandContext(ctx, r.opt.Kubectl, LogsArgv(inv.Run.RunConfig.Kube, name)...)
	cmd.WaitDelay = runners.ClientWaitDelay
	cmd.Env = r.opt.BaseEnv
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = fresh, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() == nil {
			log.Debug("pod log not read", "err", err, "stderr", strings.TrimSpace(stderr.String()))
		}
		return
	}
	inv.Tail.Set(fresh)
}

var errNotFound = errors.New("not found")

func (r *Runner) kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, r.opt.Kubectl, args...)
	cmd.WaitDelay = runners.ClientWaitDelay
	cmd.Env = r.opt.BaseEnv
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "(NotFound)") {
			return "", fmt.Errorf("%w: %s", errNotFound, msg)
		}
		return "", fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}
