package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/nymphd/nymph/cmd/nymph/internal/devstack"
	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
)

func runDev(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("nymph dev", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	tourOnly := fs.Bool("tour-only", false, "exit after the tour instead of running until Ctrl-C")
	noTour := fs.Bool("no-tour", false, "skip the tour; just run serve and the daemon")
	keep := fs.Bool("keep", false, "keep the temporary directory (data, logs, config) after exit")
	dir := fs.String("dir", "", "create the temporary directory under DIR (default: the system temp dir)")
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "nymph dev: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph dev: find own binary: %v\n", err)
		return 1
	}
	ctx, cancel := untilSignal(ctx, env, func() {
		fmt.Fprintln(env.stderr, "\nnymph dev: stopping the daemon, then serve")
	})
	defer cancel()

	log := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	stack, err := devstack.Start(ctx, devstack.Options{Binary: bin, Dir: *dir, Keep: *keep, Log: log})
	if err != nil {
		fmt.Fprintf(env.stderr, "nymph dev: %v\n", err)
		return 1
	}
	code := devRun(ctx, env, stack, *tourOnly, *noTour)
	if err := stack.Stop(); err != nil {
		fmt.Fprintf(env.stderr, "nymph dev: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if *keep {
		fmt.Fprintf(env.stdout, "kept %s\n", stack.Dir)
	}
	return code
}

// devRun shows the stack and the tour, then waits for Ctrl-C.
func devRun(ctx context.Context, env *cliEnv, stack *devstack.Stack, tourOnly, noTour bool) int {
	stack.PrintHowTo(env.stdout)
	fmt.Fprintln(env.stdout, "== waiting for the daemon to say hello")
	w, err := stack.WaitWorker(ctx)
	if err != nil {
		return devFailed(ctx, env, err)
	}
	termtext.Fprintf(env.stdout, "worker %s (%s) is %s, runners %v\n\n", w.ID, w.Label, w.State, w.Capabilities.Runners)
	if !noTour {
		if err := stack.Tour(ctx, w, env.stdout); err != nil {
			return devFailed(ctx, env, err)
		}
		fmt.Fprintln(env.stdout, "== tour done")
	}
	if tourOnly {
		return 0
	}
	fmt.Fprintln(env.stdout, "serve and the daemon keep running; Ctrl-C stops both and removes the directory.")
	select {
	case <-ctx.Done():
		return 0
	case <-stack.Exited():
		fmt.Fprintf(env.stderr, "nymph dev: %s\n", stack.Why())
		return 1
	}
}

func devFailed(ctx context.Context, env *cliEnv, err error) int {
	if ctx.Err() != nil {
		return 0 // interrupted: not a failure
	}
	fmt.Fprintf(env.stderr, "nymph dev: %v\n", err)
	return 1
}
