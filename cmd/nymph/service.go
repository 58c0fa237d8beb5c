package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/service"
	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/daemonloop"
	"github.com/nymphd/nymph/hostio/sdnotify"
	"github.com/nymphd/nymph/wirecore/daemon"
)

const installServiceUsage = "usage: nymph install-service [--relay|--serve] [--os linux|darwin|windows] [--bin PATH] [--config F] [--pairs N] [-- ARGS...]"

// runInstallService prints the service definition of the daemon, the
// relay or serve for an OS. It never installs one: what it prints is for
// the operator to read, then save where the printed comment says.
func runInstallService(_ context.Context, env *cliEnv, args []string) int {
	var extra []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, extra = args[:i], args[i+1:]
	}
	fs := flag.NewFlagSet("nymph install-service", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, installServiceUsage)
		fs.PrintDefaults()
	}
	relay := fs.Bool("relay", false, "the relay's definition instead of the daemon's")
	serve := fs.Bool("serve", false, "serve's definition instead of the daemon's")
	goos := fs.String("os", runtime.GOOS, "the OS the definition is for: linux (a systemd unit), darwin (a launchd LaunchDaemon) or windows (a bash script registering a logon task)")
	bin := fs.String("bin", "", "the nymph binary's path on the target host (default: this executable on this OS, an obvious placeholder for another)")
	config := fs.String("config", "", "the daemon's udf-daemon.toml: passed as --config, and its [shutdown] grace_s sizes the stop timeout (default: the daemon's own lookup, the built-in grace)")
	pairs := fs.Int("pairs", service.DefaultRelayPairs, "the relay's pair count, which sizes its open-file limit")
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "nymph install-service: unexpected argument %q (arguments for the service go after --)\n%s\n", fs.Arg(0), installServiceUsage)
		return 2
	}
	if *relay && *serve {
		fmt.Fprintln(env.stderr, "nymph install-service: --relay and --serve: pick one")
		return 2
	}
	spec := service.Spec{Role: service.Daemon, OS: *goos, Bin: *bin, Args: extra, RelayPairs: *pairs}
	switch {
	case *relay:
		spec.Role = service.Relay
	case *serve:
		spec.Role = service.Serve
	}
	local := *goos == runtime.GOOS
	if spec.Bin == "" {
		if !local {
			spec.Bin = service.Placeholder(*goos)
		} else if exe, err := os.Executable(); err != nil {
			fmt.Fprintf(env.stderr, "nymph install-service: this executable's path: %v; pass --bin\n", err)
			return 1
		} else {
			spec.Bin = exe
		}
	}
	if spec.Role == service.Daemon {
		cfg := daemonconfig.Defaults()
		if *config != "" {
			loaded, err := daemonconfig.Load(daemonconfig.Lookup{Explicit: *config})
			if err != nil {
				fmt.Fprintf(env.stderr, "nymph install-service: %v\n", err)
				return 1
			}
			cfg = loaded.Config
			spec.Config, spec.GraceFrom = *config, *config
			if local {
				if abs, err := filepath.Abs(*config); err == nil {
					spec.Config, spec.GraceFrom = abs, abs
				}
			}
		}
		spec.GraceS = cfg.Shutdown.GraceS
	} else if *config != "" {
		fmt.Fprintln(env.stderr, "nymph install-service: --config is the daemon's; the relay and serve take their settings after --")
		return 2
	}
	out, err := service.Render(spec)
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph install-service: %v\n", err)
		return 2
	}
	env.stdout.Write(out)
	return 0
}

// newSupervisor is what the daemon loop tells systemd through sd_notify:
// nil (nothing to tell) when NOTIFY_SOCKET is unset.
func newSupervisor(getenv func(string) string, log *slog.Logger) daemonloop.Supervisor {
	n, err := sdnotify.FromEnv(getenv)
	if err != nil {
		log.Warn("service manager not notified", "err", err)
		return nil
	}
	if n == nil {
		return nil
	}
	every, err := sdnotify.WatchdogInterval(getenv, os.Getpid())
	if err != nil {
		log.Warn("watchdog not fed", "err", err)
	}
	return &systemdSupervisor{n: n, every: every, log: log}
}

// systemdSupervisor maps the daemon's states to sd_notify: READY=1 the
// first time it polls (its hello answered), STOPPING=1 when it drains or
// exits, STATUS= at every change, WATCHDOG=1 from the loop's heartbeat.
type systemdSupervisor struct {
	n     *sdnotify.Notifier
	every time.Duration
	log   *slog.Logger

	last            string
	ready, stopping bool
}

func (s *systemdSupervisor) State(state string) {
	if state == s.last {
		return
	}
	s.last = state
	lines := []string{sdnotify.Status("daemon " + state)}
	switch {
	case state == daemon.StatePolling && !s.ready:
		s.ready = true
		lines = append(lines, sdnotify.Ready)
	case (state == daemon.StateDraining || state == daemon.StateExiting) && !s.stopping:
		s.stopping = true
		lines = append(lines, sdnotify.Stopping)
	}
	s.send(lines...)
}

func (s *systemdSupervisor) Alive() { s.send(sdnotify.Watchdog) }

func (s *systemdSupervisor) AliveEvery() time.Duration { return s.every }

func (s *systemdSupervisor) send(lines ...string) {
	if err := s.n.Notify(lines...); err != nil {
		s.log.Debug("sd_notify", "err", err)
	}
}

// announcer tells systemd, when it runs serve or the relay as
// Type=notify, that the process is ready and, later, that it stops. Both
// are no-ops outside systemd (NOTIFY_SOCKET unset); a failed write is
// logged, never fatal.
type announcer struct {
	n    *sdnotify.Notifier
	what string
	log  *slog.Logger
}

func newAnnouncer(getenv func(string) string, what string, log *slog.Logger) announcer {
	n, err := sdnotify.FromEnv(getenv)
	if err != nil {
		log.Warn("service manager not notified", "err", err)
	}
	return announcer{n: n, what: what, log: log}
}

func (a announcer) send(lines ...string) {
	if a.n == nil {
		return
	}
	if err := a.n.Notify(lines...); err != nil {
		a.log.Warn("service manager not notified", "err", err)
	}
}

// ready says the process serves: serve listens, the relay pumps every
// pair it found at start.
func (a announcer) ready() { a.send(sdnotify.Ready, sdnotify.Status(a.what+" ready")) }

// stopping says a shutdown has begun.
func (a announcer) stopping() { a.send(sdnotify.Stopping, sdnotify.Status(a.what+" stopping")) }
