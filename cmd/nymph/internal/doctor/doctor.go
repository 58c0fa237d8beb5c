// Package doctor runs `nymph doctor` and `nymph relay doctor`: named
// checks of a host, run in parallel, each with its own timeout, reported
// one line each (or as JSON) in the order they were listed.
//
// It decides what a check is (a name and a function returning a status,
// a reason and a fix), that a check which panics or hangs is reported as
// a failure of that check alone, the order and format of the report, and
// the exit status (1 when any check failed). The checks of a daemon host
// are in this package too (files.go, tools.go, server.go); which ones run
// and on what configuration is decided by cmd/nymph, which wires them.
package doctor

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
)

// Status is a check's verdict.
type Status string

const (
	// StatusOK: the check passed.
	StatusOK Status = "ok"
	// StatusWarn: something works less well than it could, or may break.
	StatusWarn Status = "warn"
	// StatusFail: something the daemon or relay needs does not work.
	StatusFail Status = "fail"
	// StatusSkip: the check does not apply here, or could not be made
	// because of what another check reports.
	StatusSkip Status = "skip"
)

// Result is one check's report. Fix is what to do; empty when the check
// passed.
type Result struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Reason string `json:"reason"`
	Fix    string `json:"fix"`
}

// OK is a passed check.
func OK(format string, a ...any) Result {
	return Result{Status: StatusOK, Reason: fmt.Sprintf(format, a...)}
}

// Skip is a check that does not apply.
func Skip(format string, a ...any) Result {
	return Result{Status: StatusSkip, Reason: fmt.Sprintf(format, a...)}
}

// Warn is a warning with its fix.
func Warn(fix, format string, a ...any) Result {
	return Result{Status: StatusWarn, Reason: fmt.Sprintf(format, a...), Fix: fix}
}

// Fail is a failure with its fix.
func Fail(fix, format string, a ...any) Result {
	return Result{Status: StatusFail, Reason: fmt.Sprintf(format, a...), Fix: fix}
}

// Check is one named check. Run must return when ctx is done; one that
// does not is abandoned (and reported failed) Grace after its timeout.
type Check struct {
	Name string
	// Timeout bounds the check (DefaultTimeout when zero).
	Timeout time.Duration
	Run     func(ctx context.Context) Result
}

// DefaultTimeout bounds a check that names no timeout of its own.
const DefaultTimeout = 10 * time.Second

// Options tune Run; the zero value is the defaults.
type Options struct {
	// Parallel bounds the checks running at once (DefaultParallel).
	Parallel int
	// Grace is how long a check whose context is done may take to
	// return its own result before it is abandoned (DefaultGrace).
	Grace time.Duration
}

// Defaults of Options.
const (
	DefaultParallel = 8
	DefaultGrace    = time.Second
)

// Run runs every check, at most opts.Parallel at once, and returns their
// results in the order of checks, however they finished. A check that
// panics is a failure naming the panic; one still running Grace after
// its timeout is a failure saying so, and the others go on.
func Run(ctx context.Context, checks []Check, opts Options) []Result {
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultParallel
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	results := make([]Result, len(checks))
	slots := make(chan struct{}, opts.Parallel)
	done := make(chan struct{})
	for i, c := range checks {
		go func() {
			defer func() { done <- struct{}{} }()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				results[i] = Result{Name: c.Name, Status: StatusSkip, Reason: "not run: " + context.Cause(ctx).Error()}
				return
			}
			// The slot is given back when the check is abandoned too: a
			// hung check must not hold up the ones behind it.
			defer func() { <-slots }()
			results[i] = runOne(ctx, c, opts.Grace)
			results[i].Name = c.Name
		}()
	}
	for range checks {
		<-done
	}
	return results
}

// runOne runs c in a goroutine of its own, so a check that ignores its
// context can be abandoned.
func runOne(ctx context.Context, c Check, grace time.Duration) Result {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make(chan Result, 1) // buffered: an abandoned check's send never blocks
	go func() {
		defer func() {
			if p := recover(); p != nil {
				out <- Fail("this is a bug in nymph doctor: report it with the line above", "the check panicked: %v", p)
			}
		}()
		out <- c.Run(cctx)
	}()
	select {
	case r := <-out:
		return r
	case <-cctx.Done():
	}
	abandon := time.NewTimer(grace)
	defer abandon.Stop()
	select {
	case r := <-out:
		return r
	case <-abandon.C:
		return Fail("run the check again; if it hangs again, what it checks is hanging (a dead NFS mount, a stuck server)",
			"no result within %s", timeout)
	}
}

// Failed reports whether any result is a failure: the exit status is 1
// then, 0 otherwise.
func Failed(results []Result) bool {
	for _, r := range results {
		if r.Status == StatusFail {
			return true
		}
	}
	return false
}

// ExitCode is 1 when any check failed, else 0.
func ExitCode(results []Result) int {
	if Failed(results) {
		return 1
	}
	return 0
}

// WriteText writes one line per result — status, name, reason and, when
// not ok, "fix:" and the fix — then a count of each status. Reasons may
// quote what a server sent, so every string is escaped for the terminal.
func WriteText(w io.Writer, results []Result) error {
	width := 0
	for _, r := range results {
		width = max(width, len(r.Name))
	}
	counts := map[Status]int{}
	for _, r := range results {
		counts[r.Status]++
		line := fmt.Sprintf("%-4s  %-*s  %s", r.Status, width, termtext.Printable(r.Name), termtext.Printable(r.Reason))
		if r.Status != StatusOK && r.Fix != "" {
			line += "; fix: " + termtext.Printable(r.Fix)
		}
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " ")); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d ok, %d warn, %d fail, %d skip\n",
		counts[StatusOK], counts[StatusWarn], counts[StatusFail], counts[StatusSkip])
	return err
}

// WriteJSON writes the results as a JSON array of {name, status, reason,
// fix}, in order.
func WriteJSON(w io.Writer, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	return termtext.WriteJSON(w, results)
}
