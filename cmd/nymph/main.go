// Command nymph is the one binary: daemon, relay, serve, ctl, dev and
// version. Each subcommand parses its flags and wires hostio adapters to a
// wirecore state machine; no protocol decision is made here.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// Version is the daemon version reported in hello (set with -ldflags -X).
var Version = "0.1.0-dev"

// command is one subcommand: it receives the arguments after its name and
// returns the process exit status.
type command struct {
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) int
}

// cliEnv is what a subcommand may touch of the outside world; tests can
// substitute every part of it.
type cliEnv struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// signals delivers SIGTERM/SIGINT; commands that drain count them.
	signals <-chan os.Signal
}

func commands() map[string]command {
	return map[string]command{
		"daemon":          {"run the daemon: hello, long-poll, run commands", runDaemon},
		"serve":           {"run the reference control plane", runServe},
		"sim":             {"simulate a fleet and its control plane in virtual time (the real state machines)", runSim},
		"ctl":             {"talk to a control plane's operator API", runCtl},
		"dev":             {"start serve and a daemon together and show a short tour", runDev},
		"install-service": {"print a systemd unit, launchd plist or Windows logon task for the daemon, relay or serve", runInstallService},
		"doctor":          {"check this host for a daemon: config, files, programs, the control plane", runDoctor},
		"relay":           {"pump FIFO and spool frames to a control plane", runRelay},
		"version":         {"print the version", runVersion},
	}
}

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, signals: sigs}
	os.Exit(run(context.Background(), env, os.Args[1:]))
}

func run(ctx context.Context, env *cliEnv, args []string) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "nymph: unknown command %q\n\n", args[0])
		usage(env.stderr, cmds)
		return 2
	}
	return c.run(ctx, env, args[1:])
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	fmt.Fprintln(w, "usage: nymph <command> [flags]")
	fmt.Fprintln(w)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, cmds[n].summary)
	}
}

func runVersion(_ context.Context, env *cliEnv, _ []string) int {
	fmt.Fprintf(env.stdout, "nymph %s (protocol 1)\n", Version)
	return 0
}

// untilSignal is ctx, cancelled too at the first SIGTERM or SIGINT main
// routes to env.signals; onSignal, when set, runs first (to say what the
// command does about it).
func untilSignal(ctx context.Context, env *cliEnv, onSignal func()) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-env.signals:
			if onSignal != nil {
				onSignal()
			}
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
