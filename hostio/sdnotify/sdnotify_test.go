package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// listen opens a real unixgram socket, as systemd's, and returns a
// function reading one datagram from it.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() string {
		t.Helper()
		buf := make([]byte, 4096)
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		return string(buf[:n])
	}
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestNotifyPathSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	read := listen(t, sock)
	n, err := FromEnv(env(SocketEnv, sock))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(Ready, Status("polling")); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "READY=1\nSTATUS=polling" {
		t.Fatalf("datagram %q", got)
	}
	if err := n.Notify(Watchdog); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "WATCHDOG=1" {
		t.Fatalf("datagram %q", got)
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract unix sockets are Linux's")
	}
	name := fmt.Sprintf("@nymph-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	read := listen(t, name)
	n, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(Stopping); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "STOPPING=1" {
		t.Fatalf("datagram %q", got)
	}
}

func TestWithoutSocketNothingIsSent(t *testing.T) {
	n, err := FromEnv(env())
	if err != nil || n != nil {
		t.Fatalf("FromEnv without %s = %v, %v; want nil, nil", SocketEnv, n, err)
	}
	if err := n.Notify(Ready); err != nil {
		t.Fatalf("a nil notifier returned %v", err)
	}
}

func TestRefusals(t *testing.T) {
	if _, err := New("vsock:2:1234"); err == nil {
		t.Error("a vsock address was taken")
	}
	if _, err := New("relative/sock"); err == nil {
		t.Error("a relative path was taken")
	}
	n, err := New(filepath.Join(t.TempDir(), "absent"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(Ready); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("a socket nobody listens on: %v, want an error naming it", err)
	}
	sock := filepath.Join(t.TempDir(), "notify")
	listen(t, sock)
	n, _ = New(sock)
	for _, bad := range []string{"READY=1\nMAINPID=1", "READY"} {
		if err := n.Notify(bad); err == nil {
			t.Errorf("%q was sent", bad)
		}
	}
}

func TestWatchdogInterval(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(string) string
		want time.Duration
		err  bool
	}{
		{"off", env(), 0, false},
		{"half", env(WatchdogUSec, "60000000"), 30 * time.Second, false},
		{"this pid", env(WatchdogUSec, "2000000", WatchdogPIDEnv, "42"), time.Second, false},
		{"another pid", env(WatchdogUSec, "2000000", WatchdogPIDEnv, "43"), 0, false},
		{"garbage", env(WatchdogUSec, "soon"), 0, true},
		{"bad pid", env(WatchdogUSec, "2000000", WatchdogPIDEnv, "me"), 0, true},
		{"too long", env(WatchdogUSec, "9223372036854775807"), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WatchdogInterval(tc.env, 42)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("= %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}
