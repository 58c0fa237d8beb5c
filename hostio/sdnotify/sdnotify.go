// Package sdnotify tells a service manager how the process is doing, by
// systemd's notify protocol: one datagram of newline-separated
// KEY=VALUE lines to the unix socket NOTIFY_SOCKET names ("READY=1",
// "STOPPING=1", "WATCHDOG=1", "STATUS=…"). A path starting with "@" is
// in Linux's abstract namespace. Without NOTIFY_SOCKET (a process not
// started by systemd, or a unit that is not Type=notify) every call does
// nothing, so callers need not ask.
package sdnotify

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// Env names.
const (
	SocketEnv      = "NOTIFY_SOCKET"
	WatchdogUSec   = "WATCHDOG_USEC"
	WatchdogPIDEnv = "WATCHDOG_PID"
)

// The states the daemon sends.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
	Watchdog = "WATCHDOG=1"
)

// Notifier writes to one notify socket. A nil *Notifier does nothing.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv is the notifier NOTIFY_SOCKET names; nil (a no-op) when it is
// unset. A socket of a kind this package cannot write to (systemd's
// "vsock:" addresses) is an error.
func FromEnv(getenv func(string) string) (*Notifier, error) {
	socket := getenv(SocketEnv)
	if socket == "" {
		return nil, nil
	}
	return New(socket)
}

// New is a notifier writing to socket: an absolute path, or "@name" for
// an abstract socket.
func New(socket string) (*Notifier, error) {
	if !strings.HasPrefix(socket, "/") && !strings.HasPrefix(socket, "@") {
		return nil, fmt.Errorf("sdnotify: %s=%q: want an absolute path or an @abstract name", SocketEnv, socket)
	}
	// The net package turns a leading "@" into the abstract namespace's
	// NUL byte.
	return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}, nil
}

// Notify sends the lines as one datagram. A socket nobody reads (the
// manager gone) is an error for the caller to log, never to stop on.
func (n *Notifier) Notify(lines ...string) error {
	if n == nil || len(lines) == 0 {
		return nil
	}
	for _, l := range lines {
		if strings.ContainsRune(l, '\n') || !strings.Contains(l, "=") {
			return fmt.Errorf("sdnotify: %q is not one KEY=VALUE line", l)
		}
	}
	// A fresh socket per message, as sd_notify(3) does: the manager may
	// have been restarted (re-executed) since the last one.
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: dial %s: %w", n.addr.Name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(lines, "\n"))); err != nil {
		return fmt.Errorf("sdnotify: write %s: %w", n.addr.Name, err)
	}
	return nil
}

// Status is a STATUS= line (shown by systemctl status); a newline in s
// is replaced, so the datagram stays one line per key.
func Status(s string) string {
	return "STATUS=" + strings.ReplaceAll(s, "\n", " ")
}

// WatchdogInterval is how often to send WATCHDOG=1: half of
// WATCHDOG_USEC, as sd_watchdog_enabled(3) advises, so one late beat
// does not get the service killed. It is 0 when the watchdog is off, or
// when WATCHDOG_PID names another process (the variable was inherited
// from a parent the manager watches, not meant for pid).
func WatchdogInterval(getenv func(string) string, pid int) (time.Duration, error) {
	usec := getenv(WatchdogUSec)
	if usec == "" {
		return 0, nil
	}
	if p := getenv(WatchdogPIDEnv); p != "" {
		want, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("sdnotify: %s=%q: %w", WatchdogPIDEnv, p, err)
		}
		if want != pid {
			return 0, nil
		}
	}
	n, err := strconv.ParseUint(usec, 10, 63)
	if err != nil {
		return 0, fmt.Errorf("sdnotify: %s=%q: %w", WatchdogUSec, usec, err)
	}
	if n > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return 0, fmt.Errorf("sdnotify: %s=%s: longer than a clock can wait", WatchdogUSec, usec)
	}
	return time.Duration(n/2) * time.Microsecond, nil
}
