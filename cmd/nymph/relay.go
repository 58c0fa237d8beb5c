package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/relay"
	"github.com/nymphd/nymph/wirecore/wire"
)

// runRelay parses the relay's flags (each also from the environment) and
// runs it until SIGTERM or SIGINT.
func runRelay(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) > 0 && args[0] == "doctor" {
		return runRelayDoctor(ctx, env, args[1:])
	}
	fs := flag.NewFlagSet("nymph relay", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	var cfg relay.Config
	var statusAddr, logLevel string
	fs.StringVar(&cfg.Prefix, "prefix", env.getenv("NYMPH_RELAY_PREFIX"), "directory of machine directories holding the pipes (env NYMPH_RELAY_PREFIX)")
	fs.StringVar(&cfg.Upstream, "upstream", env.getenv("NYMPH_RELAY_UPSTREAM"), "control plane base URL (env NYMPH_RELAY_UPSTREAM)")
	fs.StringVar(&cfg.TokenFile, "token-file", env.getenv("NYMPH_RELAY_TOKEN_FILE"), "file holding the relay's bearer token, mode 0600 (env NYMPH_RELAY_TOKEN_FILE)")
	fs.StringVar(&cfg.CAFile, "ca-file", env.getenv(daemonconfig.CAFileEnv), "CA certificate an https upstream's must be signed by: nymph serve's DATA-DIR/tls/ca.crt (env "+daemonconfig.CAFileEnv+"; default: the system's roots)")
	fs.DurationVar(&cfg.FrameTimeout, "frame-timeout", relay.DefaultFrameTimeout, "drop a partial frame after this long without a byte")
	fs.DurationVar(&cfg.UpstreamTimeout, "upstream-timeout", relay.DefaultUpstreamTimeout, "timeout of one upstream request")
	fs.DurationVar(&cfg.SpoolInterval, "spool-interval", relay.DefaultSpoolInterval, "how often spool directories are polled")
	fs.BoolVar(&cfg.AllowSharedWriters, "allow-shared-writers", false, "accept machine directories and pipes every user may write")
	fs.StringVar(&statusAddr, "status-listen", "", "loopback address serving /metrics and /status (off when empty)")
	fs.StringVar(&logLevel, "log-level", string(wire.LogInfo), "log level: "+wire.LogLevelChoices)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || cfg.Prefix == "" || cfg.Upstream == "" || cfg.TokenFile == "" {
		fmt.Fprintln(env.stderr, "usage: nymph relay --prefix DIR --upstream URL --token-file FILE [flags]")
		return 2
	}
	// The daemon's level names (its config file's, aliases included), so
	// one fleet's relays and daemons are set with the same words.
	level, ok := wire.ParseFileLogLevel(logLevel)
	if !ok {
		fmt.Fprintf(env.stderr, "nymph relay: --log-level %q: want %s\n", logLevel, wire.LogLevelChoices)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slogLevel(level)}))
	if limit, err := relay.RaiseFileLimit(); err != nil {
		cfg.Logger.Warn("relay: open-file limit unchanged", "err", err)
	} else {
		cfg.Logger.Info("relay: open-file limit", "nofile", limit)
	}
	rl, err := relay.New(cfg)
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph relay: %v\n", err)
		return 1
	}
	systemd := newAnnouncer(env.getenv, "relay", cfg.Logger)
	ctx, cancel := untilSignal(ctx, env, func() {
		cfg.Logger.Info("relay: shutting down")
		systemd.stopping()
	})
	defer cancel()
	go func() {
		select {
		case <-rl.Ready():
			systemd.ready()
		case <-ctx.Done():
		}
	}()
	if statusAddr != "" {
		go func() {
			if err := rl.ServeStatus(ctx, statusAddr); err != nil {
				cfg.Logger.Error("relay: status listener stopped", "err", err)
			}
		}()
	}
	if err := rl.Run(ctx); err != nil {
		fmt.Fprintf(env.stderr, "nymph relay: %v\n", err)
		return 1
	}
	return 0
}
