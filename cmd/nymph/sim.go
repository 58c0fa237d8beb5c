package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/simplot"
	"github.com/nymphd/nymph/cmd/nymph/internal/simscenario"
	"github.com/nymphd/nymph/hostio/simloop"
	"github.com/nymphd/nymph/wirecore/sim"
)

// runSim is `nymph sim`: the discrete-event simulator (wirecore/sim) on a
// scenario, its summary on stdout, and with --out the time series, the
// summary and the plots as files.
func runSim(ctx context.Context, env *cliEnv, args []string) int {
	set := flag.NewFlagSet("nymph sim", flag.ContinueOnError)
	set.SetOutput(env.stderr)
	scenario := set.String("scenario", "", "shipped scenario name ("+strings.Join(simscenario.Names(), ", ")+") or a TOML file")
	compare := set.String("compare", "", "a second scenario to run and draw beside the first (with --out: compare.svg)")
	seed := set.Uint64("seed", 0, "random seed (default: the scenario's)")
	daemons := set.Int("daemons", 0, "number of daemons (default: the scenario's)")
	duration := set.Duration("duration", 0, "virtual time to simulate (default: the scenario's)")
	out := set.String("out", "", "directory for timeseries.csv, summary.txt and the plots (SVG and PNG)")
	progress := set.Bool("progress", false, "show a progress bar on stderr even when it is not a terminal")
	if err := set.Parse(args); err != nil {
		return flagStatus(err)
	}
	if set.NArg() > 0 {
		fmt.Fprintf(env.stderr, "nymph sim: unexpected argument %q\n", set.Arg(0))
		return 2
	}
	if *scenario == "" {
		fmt.Fprintf(env.stderr, "nymph sim: --scenario is required (shipped: %s)\n", strings.Join(simscenario.Names(), ", "))
		return 2
	}
	override := func(sc *sim.Scenario) {
		if *seed != 0 {
			sc.Seed = *seed
		}
		if *daemons != 0 {
			sc.Daemons = *daemons
		}
		if *duration != 0 {
			sc.Duration = *duration
		}
	}
	// SIGINT or SIGTERM stops a long run between steps, with what it
	// reached on stderr.
	ctx, cancel := untilSignal(ctx, env, nil)
	defer cancel()
	names := []string{*scenario}
	if *compare != "" {
		names = append(names, *compare)
	}
	defer simloop.TuneGC()()

	var runs []simplot.Series
	for _, name := range names {
		sc, err := simscenario.Load(name)
		if err != nil {
			fmt.Fprintf(env.stderr, "nymph sim: %v\n", err)
			return 2
		}
		override(&sc)
		s, err := sim.New(sc)
		if err != nil {
			fmt.Fprintf(env.stderr, "nymph sim: %v\n", err)
			return 2
		}
		bar := newProgressBar(env.stderr, *progress || isTerminal(env.stderr), sc.Name)
		start := time.Now()
		// Two goroutines when the fleet is dense enough to gain from
		// them (sim.Sim.Density); the CSV is the same either way.
		res, err := simloop.Run(ctx, s, bar.update)
		if err != nil {
			bar.interrupted()
			var reached time.Duration
			if n := len(res.Rows); n > 0 {
				reached = res.Rows[n-1].T
			}
			fmt.Fprintf(env.stderr, "nymph sim: %s: stopped at %s of %s of virtual time: %v\n", sc.Name, reached, sc.Duration, err)
			return 1
		}
		bar.done(time.Since(start), res.Summary.Events)
		runs = append(runs, simplot.Series{Label: sc.Name, Result: res})
	}
	for i, r := range runs {
		if i > 0 {
			fmt.Fprintln(env.stdout)
		}
		if err := r.Result.WriteSummary(env.stdout); err != nil {
			fmt.Fprintf(env.stderr, "nymph sim: %v\n", err)
			return 1
		}
	}
	if *out == "" {
		return 0
	}
	if err := writeSimOutputs(*out, runs); err != nil {
		fmt.Fprintf(env.stderr, "nymph sim: %v\n", err)
		return 1
	}
	return 0
}

// writeSimOutputs writes the first run's files into dir, a compared
// run's beside them with its name as a prefix, and the comparison chart.
func writeSimOutputs(dir string, runs []simplot.Series) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	for i, r := range runs {
		prefix := ""
		if i > 0 {
			prefix = r.Label + "-"
		}
		if err := writeSimFile(filepath.Join(dir, prefix+"timeseries.csv"), r.Result.WriteCSV); err != nil {
			return err
		}
		if err := writeSimFile(filepath.Join(dir, prefix+"summary.txt"), r.Result.WriteSummary); err != nil {
			return err
		}
		charts, err := simplot.Charts(r)
		if err != nil {
			return err
		}
		for _, base := range []string{"requests", "fleet", "dispatch"} {
			if err := simplot.Save(charts[base], dir, prefix+base); err != nil {
				return err
			}
		}
	}
	if len(runs) > 1 {
		p, err := simplot.Compare("plane requests/s: "+runs[0].Label+" vs "+runs[1].Label, runs)
		if err != nil {
			return err
		}
		if err := simplot.Save(p, dir, "compare"); err != nil {
			return err
		}
	}
	return nil
}

func writeSimFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal): a
// progress bar drawn into a file or a pipe is only noise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar redraws one stderr line as virtual time advances, at most
// every tenth of a second of wall time.
type progressBar struct {
	w     io.Writer
	on    bool
	label string
	last  time.Time
}

func newProgressBar(w io.Writer, on bool, label string) *progressBar {
	return &progressBar{w: w, on: on, label: label}
}

func (b *progressBar) update(done, total time.Duration) {
	if !b.on || time.Since(b.last) < 100*time.Millisecond && done < total {
		return
	}
	b.last = time.Now()
	const width = 30
	frac := min(float64(done)/float64(total), 1)
	n := int(frac * width)
	fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%% %s/%s", b.label, strings.Repeat("#", n), strings.Repeat(".", width-n), 100*frac,
		done.Truncate(time.Second), total)
}

func (b *progressBar) done(wall time.Duration, events uint64) {
	if !b.on {
		return
	}
	fmt.Fprintf(b.w, "\r%s: %d events in %s (%.0f events/s)%s\n", b.label, events, wall.Round(time.Millisecond),
		float64(events)/wall.Seconds(), strings.Repeat(" ", 20))
}

// interrupted ends the bar's line, so what follows starts on its own.
func (b *progressBar) interrupted() {
	if b.on {
		fmt.Fprintln(b.w)
	}
}
