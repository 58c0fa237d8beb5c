package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
	"github.com/nymphd/nymph/hostio/opclient"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// The tour's commands, shown to the user as they run.
const (
	tourExec     = "uname -a"
	tourStreamed = `for i in 1 2 3 4 5; do echo "tick $i"; sleep 0.4; done; echo "done streaming" >&2`
	tourSetup    = `#!/usr/bin/env bash
# A setup script runs once, in order, beside the daemon's work.
set -euo pipefail
echo "setting up on $(hostname)"
sleep 1
echo "setup finished"
`
)

// PrintHowTo writes how to reach the stack from another terminal.
func (s *Stack) PrintHowTo(w io.Writer) {
	fmt.Fprintf(w, "nymph dev: control plane at %s, one daemon attached\n", s.ServerURL)
	fmt.Fprintf(w, "  everything lives in %s\n", s.Dir)
	fmt.Fprintf(w, "  serve log:   %s\n", s.ServeLog)
	fmt.Fprintf(w, "  daemon log:  %s\n", s.DaemonLog)
	fmt.Fprintf(w, "  introspect:  %s\n", s.IntrospectURL)
	fmt.Fprintf(w, "  trust:       serve speaks TLS 1.3 with its own CA (%s) and takes signed requests only;\n", s.CAFile)
	fmt.Fprintf(w, "               the daemon joined with a one-time token, as a new host would:\n")
	fmt.Fprintf(w, "                 %s\n", redactToken(s.JoinLine))
	fmt.Fprintf(w, "               and signs every request with its key %s\n\n", s.KeyID)
	fmt.Fprintf(w, "Talk to it from another terminal:\n")
	fmt.Fprintf(w, "  export NYMPH_SERVER=%s\n", s.ServerURL)
	fmt.Fprintf(w, "  export NYMPH_CA_FILE=%s\n", s.CAFile)
	fmt.Fprintf(w, "  export NYMPH_ADMIN_TOKEN_FILE=%s\n", s.AdminTokenFile)
	fmt.Fprintf(w, "  nymph ctl workers\n")
	fmt.Fprintf(w, "  nymph ctl exec WORKER -- uname -a\n\n")
}

// redactToken shortens the secret half of a join line's token: it is
// spent, but a secret need not be printed whole to be recognised.
func redactToken(line string) string {
	head, tok, ok := strings.Cut(line, "--token ")
	if !ok || len(tok) < 16 {
		return line
	}
	secret, fp, _ := strings.Cut(tok, ".")
	return head + "--token " + secret[:8] + "…." + fp
}

// WaitWorker waits until the daemon says, through its introspection
// server, that its hello was answered and it polls, and then until the
// server lists the worker it was given as active.
func (s *Stack) WaitWorker(ctx context.Context) (operator.Worker, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var st daemonStatus
	var w operator.Worker
	err := s.untilExit(ctx, func(ctx context.Context) (err error) {
		st, err = s.waitDaemon(ctx, func(st daemonStatus) bool {
			return st.State == daemon.StatePolling && st.WorkerID != ""
		})
		if err != nil {
			return fmt.Errorf("wait for the daemon's hello: %w (the daemon: %v)", err, st)
		}
		w, err = s.Client.WaitWorker(ctx, func(w operator.Worker) bool { return w.ID == st.WorkerID && w.State == "active" })
		if err != nil {
			return fmt.Errorf("wait for the server to list worker %s as active: %w", st.WorkerID, err)
		}
		return nil
	})
	if err != nil {
		return w, fmt.Errorf("devstack: %w; see %s and %s:\n%s", err, s.ServeLog, s.DaemonLog, tail(s.DaemonLog))
	}
	return w, nil
}

// untilExit runs wait, cancelling it when serve or the daemon exits first;
// the error then says which did.
func (s *Stack) untilExit(ctx context.Context, wait func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- wait(ctx) }()
	select {
	case err := <-got:
		return err
	case <-s.Exited():
		cancel()
		<-got
		return errors.New(s.Why())
	}
}

// Tour runs the three steps against worker w, printing each command and
// its output. It fails on the first step that does not do what it shows.
func (s *Stack) Tour(ctx context.Context, w operator.Worker, out io.Writer) error {
	steps := []struct {
		title string
		run   func(context.Context, string, io.Writer) error
	}{
		{"an exec: the command runs under bash -c on the worker; its output comes back with the exit code", s.stepExec},
		{"a streamed exec: output arrives while the command runs (note the timestamps)", s.stepStreamed},
		{"a setup script with --refresh-capabilities: the worker goes setting_up → active", s.stepSetup},
	}
	for i, st := range steps {
		fmt.Fprintf(out, "== %d. %s\n", i+1, st.title)
		if err := st.run(ctx, w.ID, out); err != nil {
			return fmt.Errorf("devstack: tour step %d: %w", i+1, err)
		}
		fmt.Fprintln(out)
	}
	return nil
}

func (s *Stack) stepExec(ctx context.Context, worker string, out io.Writer) error {
	termtext.Fprintf(out, "$ nymph ctl exec %s -- %s\n", worker, tourExec)
	_, res, err := s.Client.RunExec(ctx, worker, operator.ExecRequest{Command: tourExec}, out, out)
	if err != nil {
		return err
	}
	termtext.Fprintf(out, "(exit code %d, %d ms)\n", res.Result.ExitCode, res.Result.DurationMS)
	if res.Result.ExitCode != 0 {
		return fmt.Errorf("%s exited %d", tourExec, res.Result.ExitCode)
	}
	return nil
}

func (s *Stack) stepStreamed(ctx context.Context, worker string, out io.Writer) error {
	termtext.Fprintf(out, "$ nymph ctl exec %s -- '%s'\n", worker, tourStreamed)
	stamped := &stampWriter{w: out, start: time.Now()}
	req := operator.ExecRequest{Command: tourStreamed, Stream: true, FlushMS: 100}
	_, res, err := s.Client.RunExec(ctx, worker, req, stamped, stamped)
	if err != nil {
		return err
	}
	stamped.flush()
	termtext.Fprintf(out, "(exit code %d, %d ms; stdout and stderr arrive interleaved as produced)\n", res.Result.ExitCode, res.Result.DurationMS)
	if res.Result.ExitCode != 0 {
		return fmt.Errorf("streamed exec exited %d", res.Result.ExitCode)
	}
	return nil
}

func (s *Stack) stepSetup(ctx context.Context, worker string, out io.Writer) error {
	termtext.Fprintf(out, "$ nymph ctl setup %s --script setup.sh --refresh-capabilities --name tour\n", worker)
	for _, line := range strings.Split(strings.TrimSpace(tourSetup), "\n") {
		termtext.Fprintf(out, "  | %s\n", line)
	}
	before, _ := s.daemonStatus(ctx) // none yet: wait for one setup done
	acc, err := s.Client.Setup(ctx, worker, operator.SetupRequest{Script: tourSetup, RefreshCapabilities: true, Name: "tour"})
	if err != nil {
		return err
	}
	termtext.Fprintf(out, "queued setup %s\n", acc.CommandID)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Watch the worker's state until it was seen setting up and is active
	// again; a state the poll missed is reported as it is.
	last, sawSetup := "", false
	_, err = s.Client.WaitWorker(ctx, func(w operator.Worker) bool {
		if w.ID != worker {
			return false
		}
		if w.State != last {
			termtext.Fprintf(out, "worker %s: %s\n", w.ID, w.State)
			last = w.State
		}
		sawSetup = sawSetup || w.State == "setting_up"
		return w.State == "active" && (sawSetup || w.PendingCommands == 0 && w.Running == 0)
	})
	if err != nil {
		return fmt.Errorf("wait for the worker to finish setting up: %w", err)
	}
	// The server may say active before the daemon is done with the script
	// (an ack precedes a refresh of capabilities); its own count of setups
	// finished says when all the script printed is in the daemon log.
	if st, err := s.waitDaemon(ctx, func(st daemonStatus) bool { return st.setupsIdle(before.Counters["setups"] + 1) }); err != nil {
		return fmt.Errorf("wait for the daemon to finish the setup: %w (the daemon: %v)", err, st)
	}
	inv, err := s.Client.Invocation(ctx, wire.SetupInvocationID(acc.CommandID))
	if err == nil {
		termtext.Fprintf(out, "setup-%s: %s", acc.CommandID, inv.State)
		if inv.Error != nil {
			termtext.Fprintf(out, " (%s: %s)", inv.Error.TypeName, inv.Error.Message)
		}
		fmt.Fprintln(out)
	} else if !opclient.IsNotFound(err) {
		return err
	}
	lines := setupOutput(s.DaemonLog, wire.SetupInvocationID(acc.CommandID))
	for _, l := range lines {
		fmt.Fprintf(out, "  setup> %s\n", l)
	}
	if len(lines) == 0 {
		fmt.Fprintf(out, "the script's own output is in the daemon log: %s\n", s.DaemonLog)
	}
	return nil
}

// childOutput matches the daemon's text log line for one line a runner's
// child printed; the value is Go-quoted by slog's text handler.
var childOutput = regexp.MustCompile(`msg="child output" .* line=("(?:[^"\\]|\\.)*"|\S*)`)

// setupOutput picks a setup's output lines out of the daemon log. The log
// is the only source there is: the daemon logs what a setup script prints
// and posts it nowhere, neither to the control plane (an invocation has a
// state and an error, no output) nor to its introspection server (counts
// only), so this is where a user would look too. Nothing found is not an
// error.
func setupOutput(logPath, invocationID string) []string {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if !strings.Contains(line, "invocation_id="+invocationID+" ") {
			continue
		}
		m := childOutput.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := m[1]
		if u, err := strconv.Unquote(text); err == nil {
			text = u
		}
		out = append(out, text)
	}
	return out
}

// stampWriter prefixes each line with the time since start, so a reader
// sees output arrive while the command runs rather than all at the end.
type stampWriter struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	buf   []byte
}

func (s *stampWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		fmt.Fprintf(s.w, "[+%4.1fs] %s\n", time.Since(s.start).Seconds(), s.buf[:i])
		s.buf = s.buf[i+1:]
	}
}

func (s *stampWriter) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) > 0 {
		fmt.Fprintf(s.w, "[+%4.1fs] %s\n", time.Since(s.start).Seconds(), s.buf)
		s.buf = nil
	}
}
