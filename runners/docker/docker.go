// Package docker is the `docker` runner and its `gvisor` variant (the same
// runner with --runtime=runsc): the entry program, or a run's script under
// `bash -c`, in a container, the invocation workdir bind-mounted at
// /workspace.
//
// It decides the docker argv, the registry login, and how a container is
// stopped when the daemon's shutdown grace expires. It does not decide the
// outcome rule or the workdir's lifetime: package runners does.
package docker

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Container-side constants of the workdir contract.
const (
	ContainerWorkdir = "/workspace"
	CIDFile          = "container.cid"
	DefaultNetwork   = "host"
	RuntimeRunc      = "runc"
	RuntimeRunsc     = "runsc"
)

// DefaultEntry is the in-container entry program (`python`, not the host's
// `python3`): runners.DefaultContainerEntry.
var DefaultEntry = runners.DefaultContainerEntry

// Options configures a docker or gvisor runner.
type Options struct {
	// Docker is the docker client binary; empty means "docker" on PATH.
	Docker string
	// Entry is the in-container entry argv; empty means DefaultEntry.
	Entry []string
	// UID and GID are the default --user; nil means the daemon's own.
	UID, GID *int
	// BaseEnv is the docker client's environment (DOCKER_HOST, …); nil
	// means os.Environ(). The registry password variable is removed from it.
	BaseEnv []string
	// LookupEnv resolves registry_auth.password_env; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// KillGrace is how long the local client has after `docker stop`
	// returned before it is killed. Zero means 5 s.
	KillGrace time.Duration
	// DrainGrace bounds logging the client's output after it exited.
	DrainGrace time.Duration
	// StopTimeout bounds `docker stop`; zero means runners.StopTimeout.
	StopTimeout time.Duration
	// PIDs, when set, holds a PID file for the docker client while it
	// runs (runners.Child.PIDs); nil records none. The container itself
	// is dockerd's child, in no group of the daemon's.
	PIDs *childpids.Dir
}

// Runner is a docker runner for one container runtime.
type Runner struct {
	kind    string
	runtime string
	opt     Options
}

// New returns the `docker` runner (--runtime=runc).
func New(opt Options) *Runner { return newRunner(runners.KindDocker, RuntimeRunc, opt) }

// NewGVisor returns the `gvisor` runner: docker with --runtime=runsc.
func NewGVisor(opt Options) *Runner { return newRunner(runners.KindGVisor, RuntimeRunsc, opt) }

func newRunner(kind, runtime string, opt Options) *Runner {
	opt.Docker = cmp.Or(opt.Docker, "docker")
	if len(opt.Entry) == 0 {
		opt.Entry = DefaultEntry
	}
	if opt.UID == nil {
		uid := os.Getuid()
		opt.UID = &uid
	}
	if opt.GID == nil {
		gid := os.Getgid()
		opt.GID = &gid
	}
	if opt.BaseEnv == nil {
		opt.BaseEnv = os.Environ()
	}
	if opt.LookupEnv == nil {
		opt.LookupEnv = os.LookupEnv
	}
	if opt.KillGrace <= 0 {
		opt.KillGrace = 5 * time.Second
	}
	if opt.DrainGrace <= 0 {
		opt.DrainGrace = 2 * time.Second
	}
	return &Runner{kind: kind, runtime: runtime, opt: opt}
}

// Kind implements runners.Runner.
func (r *Runner) Kind() string { return r.kind }

// RunArgv is the full `docker run` argv (without the client binary) for an
// invocation, in the order the first implementation of the protocol used
// (entry programs and operators' scripts expect it):
//
//	run --rm -i --runtime=<rt> --cidfile <workdir>/container.cid
//	--network=<network|host> -v <workdir>:/workspace [-v extra …]
//	[-e caller K=V … (sorted)] -e DREAMLAKE_INVOCATION_ID=… -e DREAMLAKE_WORKDIR=/workspace
//	[-e DREAMLAKE_PARENT/ROOT_INVOCATION_ID=… when set]
//	[-w /workspace for a script] [raw docker.args …]
//	[--user uid:gid unless args carry -u/--user]
//	<image> <entry …> | <image> bash -c <script>
//
// A script (RunBody.script) runs in the workdir, /workspace; the image
// must have bash.
func (r *Runner) RunArgv(inv runners.Invocation) []string {
	dc := inv.Run.RunConfig.Docker
	if dc == nil {
		dc = &wire.DockerConfig{}
	}
	network := cmp.Or(dc.Network, DefaultNetwork)
	argv := []string{"run", "--rm", "-i", "--runtime=" + r.runtime,
		"--cidfile", filepath.Join(inv.Workdir, CIDFile),
		"--network=" + network,
		"-v", inv.Workdir + ":" + ContainerWorkdir}
	for _, v := range dc.Volumes {
		argv = append(argv, "-v", v)
	}
	keys := make([]string, 0, len(dc.Env))
	for k := range dc.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		argv = append(argv, "-e", k+"="+dc.Env[k])
	}
	for _, kv := range runners.ChildEnv(inv.Run, ContainerWorkdir) {
		argv = append(argv, "-e", kv)
	}
	if inv.Run.Script != nil {
		argv = append(argv, "-w", ContainerWorkdir)
	}
	argv = append(argv, dc.Args...)
	if !HasUserFlag(dc.Args) {
		argv = append(argv, "--user", strconv.Itoa(*r.opt.UID)+":"+strconv.Itoa(*r.opt.GID))
	}
	argv = append(argv, inv.Run.RunConfig.Image)
	if inv.Run.Script != nil {
		return append(argv, runners.ScriptArgv(*inv.Run.Script)...)
	}
	return append(argv, r.opt.Entry...)
}

// HasUserFlag reports whether raw docker args already choose the user
// (-u X, -uX, -u=X, --user X, --user=X).
func HasUserFlag(args []string) bool {
	for _, a := range args {
		if a == "--user" || strings.HasPrefix(a, "--user=") || strings.HasPrefix(a, "-u") {
			return true
		}
	}
	return false
}

// Run implements runners.Runner.
func (r *Runner) Run(ctx context.Context, inv runners.Invocation) runners.Outcome {
	log := inv.Logger()
	if inv.Run.RunConfig.Image == "" {
		return runners.Failed(wire.ErrTypeImageRequired, "run_config.image is required by the "+r.kind+" runner")
	}
	env := r.clientEnv(inv.Run.RunConfig.Docker)
	if dc := inv.Run.RunConfig.Docker; dc != nil && dc.RegistryAuth != nil {
		if err := r.login(ctx, *dc.RegistryAuth, env); err != nil {
			if ctx.Err() != nil {
				return runners.Killed()
			}
			log.Warn("registry login failed; run not attempted", "err", err)
			return runners.Failed(wire.ErrTypeRegistryAuth, err.Error())
		}
	}
	// The client writes the container's id (--cidfile) once it made the
	// container; a redelivered run may have left one it would refuse,
	// kept because its container could not be stopped: that container
	// is removed first, as the next start would, or the run fails with
	// the record kept.
	if err := r.removeEarlier(ctx, inv.Workdir); err != nil {
		return runners.Failed(wire.ErrTypeDaemon, r.kind+" runner: container of an earlier delivery of this run: "+err.Error())
	}
	release, err := runners.Follow(inv.Workdir, CIDFile, "")
	if err != nil {
		return runners.Failed(wire.ErrTypeDaemon, r.kind+" runner: "+err.Error())
	}
	exited, stuck, err := r.runClient(ctx, inv, env, log)
	if !stuck {
		// With the client gone its --rm took the container, or docker
		// stop ended it: nothing is left for the next start to stop.
		release()
	}
	if o, unfinished := runners.Unfinished(err); unfinished {
		return o
	}
	if inv.Run.Script != nil {
		return scriptOutcome(exited)
	}
	return runners.ReadOutcome(inv.Workdir, exited)
}

// ExitNotFound is what `docker run` exits with when the container's
// command cannot be found (and what bash exits with for a script's own
// command that is not found).
const ExitNotFound = 127

// scriptOutcome decides a script by the docker client's exit status, which
// is the script's. 127 says what it most likely means here: an image
// without bash.
func scriptOutcome(exited error) runners.Outcome {
	o := runners.ScriptDone(exited)
	if o.ExitCode != nil && *o.ExitCode == ExitNotFound && o.Error != nil {
		o.Error.Message += " (command not found: the image has no bash, or the script ran a command it does not have)"
	}
	return o
}

// clientEnv is the docker client's environment, without the variable
// that holds the registry password.
func (r *Runner) clientEnv(dc *wire.DockerConfig) []string {
	if dc == nil || dc.RegistryAuth == nil || dc.RegistryAuth.PasswordEnv == "" {
		return r.opt.BaseEnv
	}
	prefix := dc.RegistryAuth.PasswordEnv + "="
	env := make([]string, 0, len(r.opt.BaseEnv))
	for _, kv := range r.opt.BaseEnv {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

// runClient runs the `docker run` client to its end. stuck is true when
// ctx ended and the container could not be stopped: it may run on.
func (r *Runner) runClient(ctx context.Context, inv runners.Invocation, env []string, log *slog.Logger) (exited error, stuck bool, err error) {
	cmd := exec.Command(r.opt.Docker, r.RunArgv(inv)...)
	cmd.Env = env
	cmd.Dir = inv.Workdir
	// Child.Run calls OnStop, if at all, on this goroutine before it returns.
	exited, err = runners.Child{Cmd: cmd, Log: log, Name: "docker runner", Spawn: r.opt.Docker,
		KillGrace: r.opt.KillGrace, DrainGrace: r.opt.DrainGrace, PIDs: r.opt.PIDs, Tail: inv.Tail,
		Started: func() { log.Info("container starting", "image", inv.Run.RunConfig.Image, "runtime", r.runtime) },
		OnStop:  func() { stuck = !r.stop(inv.Workdir, env, log) },
	}.Run(ctx)
	return exited, stuck, err
}

// stop runs `docker stop <cid>` (SIGTERM, SIGKILL after docker's 10 s)
// when the container id has been written, and reports whether it did.
func (r *Runner) stop(workdir string, env []string, log *slog.Logger) bool {
	b, err := os.ReadFile(filepath.Join(workdir, CIDFile))
	cid := strings.TrimSpace(string(b))
	if err != nil || cid == "" {
		// The client may still make the container once it is killed:
		// its cidfile, should docker write one, is the next start's.
		log.Warn("no container id yet; killing the docker client only", "err", err)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(r.opt.StopTimeout, runners.StopTimeout))
	defer cancel()
	cmd := exec.CommandContext(ctx, r.opt.Docker, "stop", cid)
	cmd.WaitDelay = runners.ClientWaitDelay
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Warn("docker stop failed; its cidfile is kept for the next start", "cid", cid, "err", err, "output", strings.TrimSpace(string(out)))
		return false
	}
	log.Info("container stopped", "cid", cid)
	return true
}
