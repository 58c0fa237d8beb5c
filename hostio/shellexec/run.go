package shellexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

func (o Options) withDefaults() Options {
	if o.BaseEnv == nil {
		o.BaseEnv = os.Environ()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.KillGrace <= 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.DrainGrace <= 0 {
		o.DrainGrace = DefaultDrainGrace
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
	if o.ShutdownPostGrace <= 0 {
		o.ShutdownPostGrace = DefaultShutdownPostGrace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// sink receives the child's output as it is read. Both streams of one exec
// share a sink; calls come from two goroutines.
type sink interface {
	write(stream int, p []byte)
}

const (
	streamStdout = iota
	streamStderr
)

func run(ctx context.Context, ex wire.Exec, opt Options) wire.ExecResult {
	start := opt.Now()
	log := opt.Logger.With("exec_id", ex.ExecID)
	var res wire.ExecResult
	if ex.Log != nil {
		res = runStreaming(ctx, ex, opt, log)
	} else {
		res = runCaptured(ctx, ex, opt, log)
	}
	res.DurationMS = wire.Int(opt.Now().Sub(start).Milliseconds())
	return res
}

func runCaptured(ctx context.Context, ex wire.Exec, opt Options, log *slog.Logger) wire.ExecResult {
	c := &capture{}
	code, err := spawnAndWait(ctx, ex, opt, c, log)
	res := wire.ExecResult{ExitCode: wire.Int(code)}
	res.Stdout = lossyString(c.buf[streamStdout])
	res.Stderr = lossyString(c.buf[streamStderr])
	if err != nil {
		msg := err.Error()
		res.Error = &msg
	} else if msg := c.truncation(); msg != "" {
		res.Error = &msg
	}
	return res
}

func runStreaming(ctx context.Context, ex wire.Exec, opt Options, log *slog.Logger) wire.ExecResult {
	sh := newShipper(ctx, ex.Log, opt, log)
	code, err := spawnAndWait(ctx, ex, opt, sh, log)
	sh.close()
	res := wire.ExecResult{ExitCode: wire.Int(code)}
	if err != nil {
		msg := err.Error()
		res.Error = &msg
	}
	return res
}

// spawnAndWait runs the command with its output going to out and returns
// the exit code the protocol wants (the child's own, -1, or -2). The error
// is set only when the child could not be spawned or waited for.
func spawnAndWait(ctx context.Context, ex wire.Exec, opt Options, out sink, log *slog.Logger) (int, error) {
	cmd := exec.Command("bash", "-c", ex.Command)
	cmd.Env = mergeEnv(opt.BaseEnv, ex.Env)
	cmd.Dir = opt.DefaultWorkdir
	if ex.Workdir != nil && *ex.Workdir != "" {
		cmd.Dir = *ex.Workdir
	}
	// Own process group, so a timeout reaches grandchildren; Pdeathsig so a
	// daemon killed outright does not leave the shell behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	p, err := openPipes()
	if err != nil {
		return wire.ExitSpawnFailed, fmt.Errorf("exec %s: %w", ex.ExecID, err)
	}
	defer p.closeAll()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdinR, p.stdoutW, p.stderrW
	if err := cmd.Start(); err != nil {
		return wire.ExitSpawnFailed, fmt.Errorf("exec %s: spawn bash in %q: %w", ex.ExecID, cmd.Dir, err)
	}
	p.closeChildEnds()
	go feedStdin(p.stdinW, ex.Stdin)
	readersDone := p.startReaders(out)

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	code, waitErr := superviseChild(ctx, cmd.Process.Pid, waited, timeoutOf(ex), opt, log)
	// The shell is gone; give output a moment to reach EOF (a background
	// process may still hold the pipes), then stop reading.
	select {
	case <-readersDone:
	case <-time.After(opt.DrainGrace):
		log.Warn("exec output still open after the shell exited; closing it")
		p.closeReadEnds()
		<-readersDone
	}
	return code, waitErr
}

func timeoutOf(ex wire.Exec) time.Duration {
	if ex.TimeoutS == nil || *ex.TimeoutS <= 0 {
		return 0
	}
	return time.Duration(float64(*ex.TimeoutS) * float64(time.Second))
}

// superviseChild waits for the shell, enforcing the timeout and ctx.
func superviseChild(ctx context.Context, pid int, waited <-chan error, timeout time.Duration, opt Options, log *slog.Logger) (int, error) {
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case err := <-waited:
		return exitCode(err)
	case <-timer:
		log.Info("exec timed out; stopping its process group", "timeout", timeout)
		StopGroup(pid, waited, opt.KillGrace)
		return wire.ExitTimeout, nil
	case <-ctx.Done():
		log.Info("exec cancelled; stopping its process group")
		StopGroup(pid, waited, opt.KillGrace)
		return wire.ExitSpawnFailed, nil
	}
}

// exitCode maps Wait's error to the child's exit code. A child ended by a
// signal has no exit code; like the reference daemon it reports -1.
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return wire.ExitSpawnFailed, fmt.Errorf("wait: %w", err)
}

// StopGroup sends SIGTERM to the process group pgid, gives the group up to
// grace to exit, then sends SIGKILL to whatever is left of it. waited
// delivers the result of waiting for the group leader; StopGroup consumes
// it. It returns once the leader has been reaped.
func StopGroup(pgid int, waited <-chan error, grace time.Duration) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	leaderGone := false
	select {
	case <-waited:
		leaderGone = true
	case <-deadline.C:
	}
	if leaderGone {
		// The leader is reaped; members may linger (a child ignoring
		// SIGTERM). Poll the group until it is empty or the grace ends.
		waitGroupEmpty(pgid, deadline.C)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if !leaderGone {
		<-waited
	}
}

func waitGroupEmpty(pgid int, deadline <-chan time.Time) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(-pgid, 0) == nil {
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

// mergeEnv puts extra on top of base. exec.Cmd keeps the last value of a
// duplicated key, so appending is enough; keys are sorted for a stable
// order.
func mergeEnv(base []string, extra map[string]string) []string {
	env := make([]string, 0, len(base)+len(extra))
	env = append(env, base...)
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// feedStdin writes the exec's stdin (empty when absent) and closes the
// pipe. A child that exits without reading makes the write fail; that is
// not an error of the exec.
func feedStdin(w *os.File, stdin *string) {
	if stdin != nil && *stdin != "" {
		_, _ = io.Copy(w, strings.NewReader(*stdin))
	}
	_ = w.Close()
}
