package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/daemonloop"
	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/selfupdate"
)

// daemonOTA wires ota_update into a daemon: the updater for the loop, and
// for a binary an update just executed, the probation that confirms it at
// its first hello or puts the previous binary back.
type daemonOTA struct {
	updater    daemonloop.Updater // nil when this host cannot update itself
	firstHello func()
}

// startOTA builds the updater and, when env carries the update marker,
// starts the probation. A daemon put back by a rollback says so.
func startOTA(ctx context.Context, env *cliEnv, cfg daemonconfig.Config, downloads *httpclient.Downloads, log *slog.Logger) daemonOTA {
	var o daemonOTA
	if v := env.getenv(selfupdate.RolledBackEnv); v != "" {
		log.Error("update rolled back: the new binary did not complete a hello; running the previous binary",
			"failed_version", v, "version", Version)
	}
	u, err := selfupdate.New(selfupdate.Options{Running: Version, ServerURL: cfg.Server.URL, CAFile: cfg.Server.CAFile, Downloads: downloads, Log: log})
	if err != nil {
		log.Warn("ota_update unavailable on this host", "err", err)
	} else {
		o.updater = u
	}
	raw := env.getenv(selfupdate.MarkerEnv)
	// Neither variable is for the daemon's children: a nymph an exec
	// starts must not take itself for an updated binary. The re-exec of a
	// rollback builds its environment afresh (selfupdate.Strip).
	os.Unsetenv(selfupdate.MarkerEnv)
	os.Unsetenv(selfupdate.RolledBackEnv)
	if raw == "" {
		return o
	}
	m, err := selfupdate.ParseMarker(raw)
	if err != nil {
		log.Warn("update marker ignored", "err", err)
		return o
	}
	log.Info("started by an update: confirming at the first hello", "version", Version, "from", m.From,
		"previous", m.Previous, "deadline", m.Deadline.UTC())
	hello := make(chan struct{})
	var once sync.Once
	o.firstHello = func() { once.Do(func() { close(hello) }) }
	go func() {
		p := &selfupdate.Probation{Marker: m, Log: log}
		if err := p.Run(ctx, hello); err != nil {
			log.Error("rollback failed", "err", err)
		}
	}()
	return o
}

// runOTAWatch is "nymph daemon ota-watch -- ARGV…": the rollback watchdog
// an updating daemon starts from its previous binary (hostio/selfupdate).
func runOTAWatch(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("nymph daemon ota-watch", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	log := slog.New(slog.NewTextHandler(env.stderr, nil)).With("process", "ota-watch")
	m, err := selfupdate.ParseMarker(env.getenv(selfupdate.MarkerEnv))
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon ota-watch: %v\n", err)
		return 2
	}
	// SIGTERM and SIGINT end the watchdog: main routes them to
	// env.signals, and nothing else here would hear them.
	ctx, cancel := untilSignal(ctx, env, nil)
	defer cancel()
	if err := selfupdate.Watch(ctx, m, fs.Args(), os.Environ(), log); err != nil {
		fmt.Fprintf(env.stderr, "nymph daemon ota-watch: %v\n", err)
		return 1
	}
	return 0
}
