package shellexec

import (
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// exitPeekEvery is how often the shell's exit is checked while output is
// still open, on a kernel without pidfds.
const exitPeekEvery = 100 * time.Millisecond

// awaitShell reads the child's output into out and reaps the shell. The
// shell's exit is watched without reaping it, so its pid stays its own
// while the output drains and the guard may still signal its group.
func awaitShell(cmd *exec.Cmd, p *pipes, out sink, drain time.Duration, log *slog.Logger) error {
	exit := watchExit(cmd.Process.Pid)
	defer exit.close()
	complete, err := collect(p, exit, out, drain)
	noteCollected(log, complete, err)
	// A background process still writing gets EPIPE rather than blocking.
	p.closeOutput(streamStdout)
	p.closeOutput(streamStderr)
	return cmd.Wait()
}

// collect reads the child's stdout and stderr into out until both reach
// EOF. It runs on the exec's own goroutine and waits in poll(2), so a
// running exec holds one blocked thread (as exec.Cmd.Wait does anyway)
// instead of two goroutines parked on Go's poller; waking those at every
// exit cost back-to-back execs a measurable share of their rate.
//
// The shell's exit is watched as well (a pidfd, else a periodic peek at
// its status): output still open drain after the shell exited belongs to
// a background process, and collect stops reading it and reports false.
func collect(p *pipes, exit exitWatch, out sink, drain time.Duration) (complete bool, err error) {
	buf := make([]byte, ReadSize)
	var fds [3]unix.PollFd
	var deadline time.Time // set once the shell exited
	for p.out[streamStdout] >= 0 || p.out[streamStderr] >= 0 {
		set := fds[:0]
		for _, fd := range p.out {
			if fd >= 0 {
				set = append(set, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			}
		}
		timeout := -1
		switch {
		case !deadline.IsZero():
			left := time.Until(deadline)
			if left <= 0 {
				return false, nil
			}
			timeout = int((left + time.Millisecond - 1) / time.Millisecond)
		case exit.pidfd >= 0:
			set = append(set, unix.PollFd{Fd: int32(exit.pidfd), Events: unix.POLLIN})
		default:
			timeout = int(exitPeekEvery / time.Millisecond)
		}
		n, err := unix.Poll(set, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll output: %w", err)
		}
		exited := false
		for _, pfd := range set {
			switch {
			case pfd.Revents == 0:
			case int(pfd.Fd) == exit.pidfd:
				exited = true
			default:
				readOnce(p, int(pfd.Fd), buf, out)
			}
		}
		if deadline.IsZero() && (exited || (n == 0 && exit.pidfd < 0 && exit.peek())) {
			deadline = time.Now().Add(drain)
		}
	}
	return true, nil
}

// readOnce reads what one readable stream has; EOF or an error closes it.
func readOnce(p *pipes, fd int, buf []byte, out sink) {
	stream := streamStdout
	if fd == p.out[streamStderr] {
		stream = streamStderr
	}
	n, err := unix.Read(fd, buf)
	switch {
	case n > 0:
		out.write(stream, buf[:n])
	case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
	default:
		p.closeOutput(stream)
	}
}

// exitWatch tells when the shell exited without reaping it: exec.Cmd.Wait
// does that afterwards.
type exitWatch struct {
	pid   int
	pidfd int // -1 when the kernel has no pidfd_open
}

func watchExit(pid int) exitWatch {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		fd = -1
	}
	return exitWatch{pid: pid, pidfd: fd}
}

// peek reports whether the shell exited, leaving it waitable.
func (w exitWatch) peek() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, w.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}

func (w exitWatch) close() {
	if w.pidfd >= 0 {
		_ = unix.Close(w.pidfd)
	}
}
