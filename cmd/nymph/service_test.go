package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/sdnotify"
	"github.com/nymphd/nymph/wirecore/wire"
)

func TestInstallServiceDefaultsAndPlaceholders(t *testing.T) {
	env, out, errb := daemonEnv(t, nil)
	if code := runInstallService(context.Background(), env, []string{"--os", runtime.GOOS}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && !strings.Contains(out.String(), "\nExecStart="+exe+" daemon\n") {
		t.Errorf("on this OS the unit runs this executable %s:\n%s", exe, out)
	}

	other := map[string]string{"linux": "darwin", "darwin": "windows", "windows": "linux"}[runtime.GOOS]
	if other == "" {
		other = "linux"
	}
	env, out, errb = daemonEnv(t, nil)
	if code := runInstallService(context.Background(), env, []string{"--os", other}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if !strings.Contains(out.String(), `path\to\nymph.exe`) && !strings.Contains(out.String(), "/path/to/nymph") {
		t.Errorf("--os %s without --bin has no placeholder:\n%s", other, out)
	}
	if strings.Contains(out.String(), exe) {
		t.Errorf("--os %s names this host's executable %s", other, exe)
	}
}

func TestInstallServiceReadsTheDaemonsGrace(t *testing.T) {
	conf := writeFile(t, "d.toml", "[shutdown]\ngrace_s = 300\n")
	env, out, errb := daemonEnv(t, nil)
	code := runInstallService(context.Background(), env, []string{"--os", "linux", "--bin", "/usr/bin/nymph", "--config", conf, "--", "--label", "gpu box"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, want := range []string{
		"\nTimeoutStopSec=330s\n",
		"grace_s is 300s (" + conf + ")",
		"\nExecStart=/usr/bin/nymph daemon --config " + conf + ` --label "gpu box"` + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("unit lacks %q:\n%s", want, out)
		}
	}
}

func TestInstallServiceRefusals(t *testing.T) {
	for _, args := range [][]string{
		{"--relay", "--serve"},
		{"--os", "plan9", "--bin", "/b"},
		{"stray"},
		{"--relay", "--config", "/etc/x.toml"},
		{"--nope"},
	} {
		env, out, _ := daemonEnv(t, nil)
		if code := runInstallService(context.Background(), env, args); code != 2 || out.Len() != 0 {
			t.Errorf("%q: exit %d, printed %q; want 2 and nothing", args, code, out)
		}
	}
	env, _, errb := daemonEnv(t, nil)
	if code := runInstallService(context.Background(), env, []string{"--config", filepath.Join(t.TempDir(), "absent.toml")}); code != 1 || !strings.Contains(errb.String(), "absent.toml") {
		t.Errorf("a missing --config: exit %d, %s", code, errb)
	}
}

// The real daemon, started as systemd would (NOTIFY_SOCKET, WATCHDOG_USEC),
// says READY=1 once its hello is answered and it polls, beats the
// watchdog while its poll is parked, and says STOPPING=1 on SIGTERM.
func TestDaemonNotifiesSystemd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the daemon runs on Linux")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		switch r.URL.Path {
		case wire.PathHello:
			id := "w-1"
			b, _ := (&wire.HelloResponse{WorkerID: &id, SessionTTLS: 86400}).MarshalMsg(nil)
			w.Write(b)
		case wire.PathPoll:
			// Parked: no step happens in the loop while it waits.
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
			b, _ := (&wire.PollResponse{}).MarshalMsg(nil)
			w.Write(b)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()

	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	env, _, errb := daemonEnv(t, map[string]string{
		sdnotify.SocketEnv: sock, sdnotify.WatchdogUSec: "100000", // a beat every 50 ms
	})
	sigs := make(chan os.Signal, 1)
	env.signals = sigs
	done := make(chan int, 1)
	go func() {
		done <- runDaemon(context.Background(), env, []string{"--server", srv.URL, "--workdir", t.TempDir(),
			"--config", writeFile(t, "empty.toml", "")})
	}()

	var got []string
	watchdogs := 0
	read := func(until string) {
		t.Helper()
		buf := make([]byte, 4096)
		for {
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s, got %q: %v\n%s", until, got, err, errb)
			}
			msg := string(buf[:n])
			got = append(got, msg)
			if msg == sdnotify.Watchdog {
				watchdogs++
			}
			if strings.Contains(msg, until) && (until != sdnotify.Watchdog || watchdogs >= 3) {
				return
			}
		}
	}
	read(sdnotify.Ready)
	if !strings.Contains(got[len(got)-1], "STATUS=daemon polling") {
		t.Errorf("READY=1 came as %q, want it with the polling status", got[len(got)-1])
	}
	read(sdnotify.Watchdog)
	sigs <- syscall.SIGTERM
	read(sdnotify.Stopping)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon did not exit after SIGTERM\n%s", errb)
	}
	for i, msg := range got {
		if strings.Contains(msg, sdnotify.Ready) && i+1 < len(got) && strings.Contains(strings.Join(got[i+1:], "\n"), sdnotify.Ready) {
			t.Errorf("READY=1 sent more than once: %q", got)
		}
	}
}

// serve under systemd (Type=notify): READY=1 once it listens, STOPPING=1
// at the signal that stops it.
func TestServeNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	env, _, errb := daemonEnv(t, map[string]string{sdnotify.SocketEnv: sock})
	sigs := make(chan os.Signal, 1)
	env.signals = sigs
	done := make(chan int, 1)
	go func() {
		done <- runServe(context.Background(), env, []string{"--listen", "127.0.0.1:0", "--store", "memory", "--data-dir", filepath.Join(t.TempDir(), "data")})
	}()
	next := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, errb)
		}
		return string(buf[:n])
	}
	if msg := next(); !strings.HasPrefix(msg, sdnotify.Ready+"\n") || !strings.Contains(msg, "serve ready") {
		t.Fatalf("first notification %q, want READY=1 with a status", msg)
	}
	sigs <- os.Interrupt
	if msg := next(); !strings.HasPrefix(msg, sdnotify.Stopping+"\n") {
		t.Fatalf("after the signal %q, want STOPPING=1", msg)
	}
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d\n%s", code, errb)
	}
}
