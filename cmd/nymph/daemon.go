package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/nymphd/nymph/hostio/blobcache"
	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/daemonloop"
	"github.com/nymphd/nymph/hostio/fifoclient"
	"github.com/nymphd/nymph/hostio/hostprobe"
	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/introspect"
	"github.com/nymphd/nymph/hostio/payload"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/hostio/shellexec"
	"github.com/nymphd/nymph/hostio/spoolclient"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/builtin"
	"github.com/nymphd/nymph/runners/docker"
	"github.com/nymphd/nymph/runners/kube"
	"github.com/nymphd/nymph/runners/process"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// cloudProbeEnv set to "off" skips the AWS and GCP metadata probes (for
// tests and hosts where a 2-second metadata timeout at boot is unwanted).
const cloudProbeEnv = "NYMPH_CLOUD_METADATA"

func runDaemon(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) > 0 && args[0] == "join" {
		return runDaemonJoin(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == "ota-watch" {
		return runOTAWatch(ctx, env, args[1:])
	}
	fs := flag.NewFlagSet("nymph daemon", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	flags := daemonconfig.Register(fs)
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "nymph daemon: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	loaded, err := daemonconfig.Load(daemonconfig.Lookup{Explicit: flags.ConfigPath, Getenv: env.getenv})
	if err == nil {
		err = flags.Apply(&loaded.Config, env.getenv)
	}
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon: %v\n", err)
		return 1
	}
	cfg := loaded.Config
	if flags.PrintConfig {
		out, err := cfg.TOML()
		if err != nil {
			fmt.Fprintf(env.stderr, "nymph daemon: %v\n", err)
			return 1
		}
		env.stdout.Write(out)
		return 0
	}
	level := new(slog.LevelVar)
	log := newLeveledLogger(env.stderr, cfg.Log, level)
	if loaded.Path == "" {
		log.Info("no config file found; using built-in defaults")
	} else {
		log.Info("config read", "path", loaded.Path)
	}
	for _, k := range loaded.Unknown {
		log.Warn("unknown config key ignored", "key", k, "path", loaded.Path)
	}
	if cfg.Runtime.AutoUpdate {
		log.Warn("[runtime] auto_update is ignored: the control plane sends ota_update itself (nymph serve --target-version with --releases)")
	}
	return daemonMain(ctx, env, cfg, log, level)
}

func daemonMain(ctx context.Context, env *cliEnv, cfg daemonconfig.Config, log *slog.Logger, level *slog.LevelVar) int {
	// One daemon per state directory: a second would share its workdir
	// and its key, and the plane would see one worker flapping between two.
	lock, err := lockStateDir(cfg)
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon: %v\n", err)
		return 1
	}
	defer lock.Release()
	// The token and the transport first: a bad token file fails at once,
	// before seconds of host probing.
	tr, closeTransport, err := buildTransport(cfg, log)
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon: %v\n", err)
		return 1
	}
	defer closeTransport()
	id, err := loadIdentity(cfg, tr)
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon: %v\n", err)
		return 1
	}
	if id != nil {
		tr = id.signer
		log.Info("requests are signed with the host key", "key_id", id.signer.KeyID(), "key_file", id.path)
	}
	mcfg, probeEnv := hostMachine(ctx, env, cfg, !tr.CanWithdraw(), log)
	if id != nil {
		pub := id.signer.PublicKey()
		mcfg.PublicKey = &pub
	}

	if err := os.MkdirAll(cfg.Runtime.Workdir, 0o711); err != nil {
		log.Warn("cannot create the workdir root", "workdir", cfg.Runtime.Workdir, "err", err)
	}

	var board *introspect.Board // nil: the loop publishes nothing
	if cfg.Introspect.Enabled {
		board = &introspect.Board{}
		srv, err := introspect.Listen(cfg.Introspect.Listen, board, log)
		if err != nil {
			log.Warn("introspection server not started", "err", err)
		} else {
			log.Info("introspection server listening", "addr", srv.Addr.String())
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = srv.Close(sctx)
			}()
		}
	}

	// One PID directory per state directory, under its lock: Reap only
	// ever sees what an earlier daemon of this workdir left running.
	pids, err := childpids.Open(filepath.Join(cfg.Runtime.Workdir, ".pids"))
	if err != nil {
		log.Warn("children run without PID files; a daemon killed outright would leave their groups", "err", err)
	} else {
		pids.Reap(ctx, log, nil)
	}

	kinds := mcfg.Runners
	// process is always built: setups run through it whatever the host offers.
	offered, err := builtin.Runners(append([]string{runners.KindProcess}, kinds...), builtin.Options{
		Process: process.Options{PIDs: pids},
		Docker:  docker.Options{Entry: cfg.Runtime.ContainerEntry, PIDs: pids},
		Kube:    kube.Options{Entry: cfg.Runtime.ContainerEntry},
	})
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon: [runtime] runners: %v\n", err)
		return 1
	}
	offered = append(offered, runners.BuildTagged()...)
	// The core resolves each run's kind ([runtime] default_runner, aliases);
	// the registry only finds the runner of the kind it names.
	registry := runners.NewRegistry(runners.Config{Root: cfg.Runtime.Workdir, Entry: cfg.Runtime.Entry, Log: log}, offered...)
	// What an earlier daemon's runs left outside its process groups (a
	// container dockerd runs) is stopped too, before the first hello.
	registry.Reap(ctx)

	downloads, err := daemonDownloads(cfg, tr)
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon: %v\n", err)
		return 1
	}
	// Like the workdir, a cache that cannot be opened fails only the
	// commands that need it, each with the reason.
	var payloads daemonloop.PayloadFetcher
	if payloads, err = payloadResolver(cfg, tr, downloads, log); err != nil {
		log.Warn("payloads cannot be resolved", "err", err)
		payloads = unresolvable{err}
	}
	ota := startOTA(ctx, env, cfg, downloads, log)
	deliveryPath := filepath.Join(cfg.Runtime.Workdir, daemonloop.DeliveryFile)
	if mcfg.Cursor, mcfg.Applied, err = daemonloop.LoadDelivery(deliveryPath); err != nil {
		log.Warn("command cursor unreadable; starting from none", "err", err)
	}
	res := daemonloop.Run(ctx, daemonloop.Options{
		Machine:     daemon.New(mcfg, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))),
		Transport:   tr,
		Runners:     registry,
		ExecOptions: shellexec.Options{DefaultWorkdir: cfg.Runtime.Workdir, Logger: log, PIDs: pids},
		Refresh: func(ctx context.Context) (wire.Capabilities, error) {
			_, detected := hostprobe.Detect(ctx, probeEnv)
			return wire.Capabilities{Runners: hostprobe.MergeRunners(cfg.Runtime.Runners, detected),
				MaxInvocations: wire.Int(cfg.Runtime.MaxInvocations), Workdir: cfg.Runtime.Workdir}, nil
		},
		Signals:    signalKinds(ctx, env.signals),
		Board:      board,
		Versions:   mcfg.Versions,
		Log:        log,
		Keys:       id.rotator(),
		Revoked:    id.revokedChan(),
		Updater:    ota.updater,
		FirstHello: ota.firstHello,
		Payloads:   payloads,

		DeliveryPath: deliveryPath,
		SetLogLevel:  func(l wire.LogLevel) { level.Set(slogLevel(l)) },

		// systemd's READY, STOPPING and watchdog, when it started the daemon.
		Supervisor: newSupervisor(env.getenv, log),
	})
	if res.Code != 0 {
		fmt.Fprintf(env.stderr, "nymph daemon: %s\n", res.Reason)
	} else {
		log.Info("daemon exited", "reason", res.Reason)
	}
	return res.Code
}

// daemonDownloads fetches what the plane points the daemon at (payloads,
// OTA binaries) with no credential: directly, or through tr when tr is a
// relay's (fifo, spool), since a relayed host reaches nothing but its
// relay.
func daemonDownloads(cfg daemonconfig.Config, tr transport.Transport) (*httpclient.Downloads, error) {
	downloads, err := httpclient.NewDownloads(cfg.Server.URL, cfg.Server.CAFile)
	if err != nil {
		return nil, err
	}
	switch cfg.Server.Transport {
	case "fifo", "spool":
		downloads.Through(tr)
	}
	return downloads, nil
}

// announcedExtensions are the extensions the hello announces: all this
// build knows, or none with [server] extensions = false.
func announcedExtensions(cfg daemonconfig.Config) []string {
	if !cfg.Server.Extensions {
		return nil
	}
	return slices.Clone(wire.KnownExtensions[:])
}

// payloadResolver opens the blob cache ([mounts]) and resolves payload
// refs: presigned through tr, fetched with downloads.
func payloadResolver(cfg daemonconfig.Config, tr transport.Transport, downloads *httpclient.Downloads, log *slog.Logger) (*payload.Resolver, error) {
	cache, err := blobcache.Open(cfg.CacheDir(), cfg.Mounts.CacheMaxBytes, log)
	if err != nil {
		return nil, fmt.Errorf("[mounts] cache_dir: %w", err)
	}
	return payload.New(payload.Options{Transport: tr, Downloads: downloads, Cache: cache, Log: log}), nil
}

// unresolvable fails every payload with why the cache did not open.
type unresolvable struct{ err error }

func (u unresolvable) Fetch(context.Context, wire.PayloadRef) (string, bool, error) {
	return "", false, u.err
}

// hostMachine probes the host and builds the daemon core's configuration
// from cfg and what the probe found; keepPoll is !CanWithdraw of the
// transport. nymph daemon join builds its enrolling hello from the same.
func hostMachine(ctx context.Context, env *cliEnv, cfg daemonconfig.Config, keepPoll bool, log *slog.Logger) (daemon.Config, hostprobe.Env) {
	probeEnv := hostprobe.System(Version)
	if env.getenv(cloudProbeEnv) == "off" {
		probeEnv.AWSBase, probeEnv.GCPBase = "", ""
	}
	probed := hostprobe.Probe(ctx, probeEnv)
	tags := hostprobe.MergeTags(cfg.Daemon.Tags, probed.Tags)
	kinds := hostprobe.MergeRunners(cfg.Runtime.Runners, probed.Runners)
	log.Info("host probed", "tags", tags, "runners", kinds)
	hostname, _ := os.Hostname()
	return daemon.Config{
		MachineID: cfg.Daemon.MachineID, Hostname: hostname, Label: cfg.Daemon.Label,
		Tags: tags, Lanes: cfg.Daemon.Lanes, Runners: kinds, Workdir: cfg.Runtime.Workdir,
		Versions: probed.Versions, DaemonVersion: Version, DefaultRunner: cfg.Runtime.DefaultRunner,
		Extensions: announcedExtensions(cfg),
		LogLevel:   wire.LogLevel(cfg.Log.Level), // canonical once validated
		Queue:      cfg.Daemon.Queue, WaitMaxS: cfg.Poll.WaitMaxS, RetryMinS: cfg.Poll.RetryMinS,
		RetryMaxS: cfg.Poll.RetryMaxS, MaxInvocations: cfg.Runtime.MaxInvocations,
		KeepAliveS: cfg.Runtime.KeepAliveS, GraceS: cfg.Shutdown.GraceS,
		// A relay cannot withdraw a request in flight: wait for the parked
		// poll's reply (the control plane answers it on the result or ack).
		// The loop reads the same answer from the transport.
		KeepPollOnWake: keepPoll,
	}, probeEnv
}

// buildTransport picks the carrier named by [server] transport.
func buildTransport(cfg daemonconfig.Config, log *slog.Logger) (transport.Transport, func(), error) {
	var token string
	if cfg.Server.TokenFile != "" {
		var err error
		if token, err = secretfile.ReadToken(cfg.Server.TokenFile); err != nil {
			return nil, nil, fmt.Errorf("[server] token_file: %w", err)
		}
	}
	switch cfg.Server.Transport {
	case "direct":
		c, err := httpclient.New(httpclient.Options{BaseURL: cfg.Server.URL, Token: token, CAFile: cfg.Server.CAFile, Log: log})
		if err != nil {
			return nil, nil, err
		}
		return c, c.CloseIdle, nil
	case "fifo":
		c, err := fifoclient.New(fifoclient.Config{Dir: cfg.Server.RelayDir,
			Replies: fifoclient.ReplyMode(cfg.Server.RelayReplies), Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return throughRelay(c, cfg, token)
	case "spool":
		c, err := spoolclient.New(spoolclient.Config{Dir: cfg.Server.RelayDir,
			Interval: time.Duration(cfg.Server.SpoolIntervalMS) * time.Millisecond, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return throughRelay(c, cfg, token)
	}
	return nil, nil, fmt.Errorf("[server] transport %q is not available in this build", cfg.Server.Transport)
}

// throughRelay wraps a relay carrier: the daemon's bearer rides in the
// envelope, and the control plane's log-sink URLs become relay endpoints.
func throughRelay(c transport.Transport, cfg daemonconfig.Config, token string) (transport.Transport, func(), error) {
	tr, err := daemonloop.ThroughRelay(c, cfg.Server.URL, token)
	if err != nil {
		return nil, nil, err
	}
	return tr, func() {}, nil
}

// newLogger builds the daemon's slog logger: text by default, JSON with
// [log] format = "json" or --log-format json.
func newLogger(w io.Writer, c daemonconfig.Log) *slog.Logger {
	return newLeveledLogger(w, c, new(slog.LevelVar))
}

// newLeveledLogger is newLogger whose level is lv, set from c.Level here
// and later by the control plane's live configuration.
func newLeveledLogger(w io.Writer, c daemonconfig.Log, lv *slog.LevelVar) *slog.Logger {
	lv.Set(slogLevel(wire.LogLevel(c.Level)))
	opts := &slog.HandlerOptions{Level: lv}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// slogLevel is the one mapping of a canonical wire.LogLevel to slog's, for
// the daemon's [log] level (canonical once daemonconfig validated it), the
// plane's live log.level and nymph relay --log-level. A name that is none
// of the levels logs at info: every caller has parsed its input already,
// so that is only a fallback that never silences a logger.
func slogLevel(l wire.LogLevel) slog.Level {
	switch l {
	case wire.LogDebug:
		return slog.LevelDebug
	case wire.LogWarn:
		return slog.LevelWarn
	case wire.LogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// signalKinds maps SIGTERM/SIGINT to the machine's signal kinds.
func signalKinds(ctx context.Context, in <-chan os.Signal) <-chan daemon.SignalKind {
	out := make(chan daemon.SignalKind, 4)
	go func() {
		for {
			select {
			case s := <-in:
				kind := daemon.SignalTerm
				if s == syscall.SIGINT || s == os.Interrupt {
					kind = daemon.SignalInt
				}
				select {
				case out <- kind:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
