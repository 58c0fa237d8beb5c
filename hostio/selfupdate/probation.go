package selfupdate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// WatchGrace is how long past the marker's deadline the watchdog waits
// for the new binary to put itself back before it kills it: the binary's
// own deadline fires first when it is alive enough to act.
const WatchGrace = 30 * time.Second

// watchTick is how often the watchdog looks at the ready file and its
// parent.
const watchTick = 100 * time.Millisecond

// Probation is the first minutes of a binary an update executed.
type Probation struct {
	Marker Marker
	// Args and Env are what the previous binary is executed with on a
	// rollback; nil is os.Args and os.Environ().
	Args, Env []string
	// Exec replaces the process image (syscall.Exec).
	Exec func(path string, argv, env []string) error
	Log  *slog.Logger
}

// Run waits for hello (closed on the first successful hello) until the
// marker's deadline. On a hello it creates the ready file, which ends the
// watchdog; at the deadline it puts the previous binary back and executes
// it, and returns only when that failed. ctx ending returns nil.
func (p *Probation) Run(ctx context.Context, hello <-chan struct{}) error {
	if p.Args == nil {
		p.Args = os.Args
	}
	if p.Env == nil {
		p.Env = os.Environ()
	}
	if p.Exec == nil {
		p.Exec = syscall.Exec
	}
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := p.Marker
	t := time.NewTimer(time.Until(m.Deadline))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-hello:
		if err := os.WriteFile(m.Ready, []byte("hello\n"), 0o600); err != nil {
			return fmt.Errorf("selfupdate: write %s: %w", m.Ready, err)
		}
		log.Info("update confirmed: hello completed", "version", m.To, "from", m.From, "previous", m.Previous)
		reap(m.Watchdog)
		return nil
	case <-t.C:
	}
	exe := m.Executable()
	log.Error("update failed: no hello before the deadline; restoring the previous binary",
		"version", m.To, "from", m.From, "deadline", m.Deadline.UTC().Format(time.RFC3339), "previous", m.Previous)
	if err := restore(m.Previous, exe); err != nil {
		return err
	}
	// The watchdog must not start a second daemon beside the one this
	// process becomes.
	if err := os.WriteFile(m.Ready, []byte("rolled back\n"), 0o600); err != nil {
		log.Warn("cannot tell the watchdog", "path", m.Ready, "err", err)
	}
	reap(m.Watchdog)
	err := p.Exec(exe, p.Args, rolledBack(p.Env, m.To))
	return fmt.Errorf("selfupdate: exec %s: %w", exe, err)
}

// reap waits for the watchdog, a child this process inherited over the
// exec, so it does not linger as a zombie.
func reap(pid int) {
	if pid <= 0 {
		return
	}
	if proc, err := os.FindProcess(pid); err == nil {
		go func() { _, _ = proc.Wait() }()
	}
}

// StartWatchdog starts "PREVIOUS daemon ota-watch -- ARGV…" with env, in
// a process group of its own (a Ctrl-C to the daemon's group must not end
// it), writing to the daemon's stderr.
func StartWatchdog(previous string, argv, env []string) (int, error) {
	cmd := exec.Command(previous, append([]string{"daemon", "ota-watch", "--"}, argv...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = ownGroup()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("selfupdate: start %s: %w", previous, err)
	}
	return cmd.Process.Pid, nil
}

// Watch is the watchdog (nymph daemon ota-watch), running from the
// previous binary as a child of the updating daemon. It returns nil when
// the ready file appears. When the daemon dies first, or is still there
// WatchGrace after the deadline (it is then killed), it puts the previous
// binary back and starts it with argv and env in a session of its own.
func Watch(ctx context.Context, m Marker, argv, env []string, log *slog.Logger) error {
	if len(argv) == 0 {
		return errors.New("selfupdate: watchdog: no arguments to restart the daemon with")
	}
	parent := m.PID
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if _, err := os.Stat(m.Ready); err == nil {
			os.Remove(m.Ready)
			return nil
		}
		if os.Getppid() != parent {
			log.Error("update failed: the new binary exited before its first hello; restoring the previous binary",
				"version", m.To, "from", m.From, "previous", m.Previous)
			break
		}
		if time.Now().After(m.Deadline.Add(WatchGrace)) {
			log.Error("update failed: the new binary neither said hello nor restored itself; killing it and restoring the previous binary",
				"version", m.To, "from", m.From, "pid", parent)
			_ = kill(parent)
			break
		}
	}
	exe := m.Executable()
	if err := restore(m.Previous, exe); err != nil {
		return err
	}
	cmd := exec.Command(exe, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = rolledBack(env, m.To)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = ownSession()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("selfupdate: restart %s: %w", exe, err)
	}
	log.Info("previous binary restarted", "executable", exe, "pid", cmd.Process.Pid, "version", m.From)
	return cmd.Process.Release()
}
