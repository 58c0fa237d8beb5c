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
	"time"

	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/hostio/procgroup"
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
// share a sink; calls come from the exec's own goroutine.
type sink interface {
	write(stream int, p []byte)
	// stopping says the exec's group is being stopped (a timeout, a
	// cancel): a write must not block from now on, or the group's
	// output would never reach EOF and the shell never be reaped.
	stopping()
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
//
// The calling goroutine reads the output and waits for the shell itself;
// the timeout and ctx reach it through a guard armed with AfterFunc.
// Back-to-back execs are bound by how many goroutines each one parks and
// wakes, so the common path (no stdin, no timeout, no cancel) starts
// none.
func spawnAndWait(ctx context.Context, ex wire.Exec, opt Options, out sink, log *slog.Logger) (int, error) {
	cmd := exec.Command("bash", "-c", ex.Command)
	cmd.Env = mergeEnv(opt.BaseEnv, ex.Env)
	cmd.Dir = opt.DefaultWorkdir
	if ex.Workdir != nil && *ex.Workdir != "" {
		cmd.Dir = *ex.Workdir
	}
	// Own process group, so a timeout reaches grandchildren; Pdeathsig so a
	// daemon killed outright does not leave the shell behind.
	cmd.SysProcAttr = procgroup.Attr()

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
	forget := recordShell(opt.PIDs, cmd.Process.Pid, log)
	if ex.Stdin != "" {
		go feedStdin(p.stdinW, ex.Stdin)
	} else {
		closeFile(p.stdinW) // the child reads EOF at once
	}

	g := newGuard(cmd.Process.Pid, opt.KillGrace, out.stopping, log)
	disarm := g.arm(ctx, timeoutOf(ex))
	waitErr := awaitShell(cmd, p, out, opt.DrainGrace, log)
	disarm()
	code, err := g.reaped(waitErr)
	if forget != nil {
		forget()
	}
	return code, err
}

// recordShell writes the shell's PID file when pids is set and returns
// what removes it once the shell is reaped (nil when there is nothing to
// remove). A file that cannot be written is logged and the exec runs on:
// it only matters if the daemon dies.
func recordShell(pids *childpids.Dir, pid int, log *slog.Logger) (forget func()) {
	if pids == nil {
		return nil
	}
	remove, err := pids.Add(pid)
	if err != nil {
		log.Warn("exec runs without a PID file; a daemon killed outright would leave its group", "pid", pid, "err", err)
		return nil
	}
	return func() {
		if err := remove(); err != nil {
			log.Warn("exec's PID file left behind", "pid", pid, "err", err)
		}
	}
}

// noteCollected logs how reading the output ended, when not at EOF.
func noteCollected(log *slog.Logger, complete bool, err error) {
	if err != nil {
		log.Warn("exec output unreadable; closing it", "err", err)
	} else if !complete {
		log.Warn("exec output still open after the shell exited; closing it")
	}
}

func timeoutOf(ex wire.Exec) time.Duration {
	if ex.TimeoutS == nil || *ex.TimeoutS <= 0 {
		return 0
	}
	return time.Duration(float64(*ex.TimeoutS) * float64(time.Second))
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

// mergeEnv puts extra on top of base. exec.Cmd keeps the last value of a
// duplicated key, so appending is enough; keys are sorted for a stable
// order.
func mergeEnv(base []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return base // exec.Cmd copies it before use
	}
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
func feedStdin(w *os.File, stdin string) {
	_, _ = io.Copy(w, strings.NewReader(stdin))
	_ = w.Close()
}
