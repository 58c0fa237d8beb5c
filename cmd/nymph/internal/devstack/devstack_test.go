package devstack

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/operator"
)

// The test binary doubles as a fake nymph: FAKE_NYMPH selects what the
// "serve" child does, so Start and Stop are tested without the real
// server. The tour itself is tested end to end by testscripts/dev_tour.
func TestMain(m *testing.M) {
	switch os.Getenv("FAKE_NYMPH") {
	case "":
		os.Exit(m.Run())
	case "parent":
		fakeParent()
	default:
		fakeNymph(os.Args[1:])
	}
}

func fakeNymph(args []string) {
	mode := os.Getenv("FAKE_NYMPH")
	if mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
	if len(args) > 0 && args[0] == "serve" {
		if mode == "crash" {
			fmt.Fprintln(os.Stderr, "serve: cannot open data dir")
			os.Exit(3)
		}
		var listen, data string
		for i, a := range args {
			switch a {
			case "--listen":
				listen = args[i+1]
			case "--data-dir":
				data = args[i+1]
			}
		}
		// As serve does: its CA in DATA-DIR/tls, written before it listens.
		a, err := tlsca.Ensure(filepath.Join(data, "tls"), nil, time.Now())
		if err != nil {
			os.Exit(7)
		}
		l, err := net.Listen("tcp", listen)
		if err != nil {
			os.Exit(4)
		}
		http.Serve(tls.NewListener(l, a.ServerConfig()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == operator.PathTokens {
				fmt.Fprint(w, `{"id": "t1", "token": "s.f", "expires_at": "2030-01-01T00:00:00Z", "join_command": "nymph daemon join --server x --token s.f"}`)
			}
		}))
	}
	if len(args) > 1 && args[0] == "daemon" && args[1] == "join" {
		fakeJoin(args[2:])
	}
	if mode == "backoff" && len(args) == 3 && args[0] == "daemon" {
		serveBackoffStatus(args[2])
	}
	select {} // the daemon: run until signalled
}

// fakeJoin does what `nymph daemon join` leaves behind: the key and the
// CA beside the config, and the config naming them.
func fakeJoin(args []string) {
	var config string
	for i, a := range args {
		if a == "--config" {
			config = args[i+1]
		}
	}
	data, _ := os.ReadFile(config)
	loaded, err := daemonconfig.Parse(config, data)
	if err != nil {
		os.Exit(8)
	}
	dir := filepath.Dir(config)
	cfg := loaded.Config
	cfg.Identity.Enabled, cfg.Identity.KeyFile = true, filepath.Join(dir, "identity.key")
	cfg.Server.CAFile = filepath.Join(dir, "ca.crt")
	out, _ := cfg.TOML()
	if os.WriteFile(cfg.Identity.KeyFile, []byte("seed\n"), 0o600) != nil || os.WriteFile(cfg.Server.CAFile, nil, 0o644) != nil ||
		os.WriteFile(config, out, 0o644) != nil {
		os.Exit(9)
	}
	fmt.Println("joined x as worker w with key ed25519-fake")
	os.Exit(0)
}

// serveBackoffStatus answers the daemon's GET /status, on the address its
// config gives, as a daemon whose hellos keep failing would.
func serveBackoffStatus(configPath string) {
	data, _ := os.ReadFile(configPath)
	loaded, err := daemonconfig.Parse(configPath, data)
	if err != nil {
		os.Exit(5)
	}
	l, err := net.Listen("tcp", loaded.Config.Introspect.Listen)
	if err != nil {
		os.Exit(6)
	}
	http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"state": "backoff", "worker_id": "dev-x-01J", "backoff_s": 1.5, "counters": {"hellos": 3, "hello_errors": 3}}`)
	}))
}

// fakeParent starts a stack, reports its children's pids, and waits to be
// killed without any chance to clean up.
func fakeParent() {
	os.Setenv("FAKE_NYMPH", "ok") // what the children are
	s, err := Start(context.Background(), Options{Binary: os.Args[0], Dir: os.Getenv("FAKE_DIR")})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(s.serve.cmd.Process.Pid, s.daemon.cmd.Process.Pid)
	select {}
}

func start(t *testing.T, mode string) (*Stack, error) {
	t.Helper()
	t.Setenv("FAKE_NYMPH", mode)
	return Start(context.Background(), Options{Binary: os.Args[0], Dir: t.TempDir(), StopGrace: 300 * time.Millisecond})
}

func TestStartWritesConfigAndStopCleansUp(t *testing.T) {
	s, err := start(t, "ok")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.DaemonConfig)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := daemonconfig.Parse(s.DaemonConfig, data)
	if err != nil || len(loaded.Unknown) > 0 {
		t.Fatalf("daemon config: %v, unknown keys %v:\n%s", err, loaded.Unknown, data)
	}
	cfg := loaded.Config
	if cfg.Server.URL != s.ServerURL || cfg.Server.CAFile != filepath.Join(s.Dir, "ca.crt") || !cfg.Identity.Enabled ||
		cfg.Identity.KeyFile != filepath.Join(s.Dir, "identity.key") || cfg.Server.TokenFile != "" || cfg.Runtime.KeepAliveS != -1 || cfg.Runtime.Workdir != filepath.Join(s.Dir, "work") ||
		!cfg.Introspect.Enabled || "http://"+cfg.Introspect.Listen+"/status" != s.IntrospectURL {
		t.Errorf("daemon config:\n%s", data)
	}
	if s.KeyID != "ed25519-fake" || s.JoinLine != "nymph daemon join --server x --token s.f" {
		t.Errorf("the join: key %q, line %q", s.KeyID, s.JoinLine)
	}
	for _, f := range []string{s.AdminTokenFile, filepath.Join(s.Dir, "identity.key")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", f, err)
		}
	}
	pids := []int{s.serve.cmd.Process.Pid, s.daemon.cmd.Process.Pid}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitExited(t, 20*time.Second, pids...)
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", s.Dir, err)
	}
}

func TestStopKillsAChildThatIgnoresSIGTERM(t *testing.T) {
	s, err := start(t, "stubborn")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Stop()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop = %v, want a report of the kill", err)
	}
	testkit.WaitExited(t, 20*time.Second, s.serve.cmd.Process.Pid, s.daemon.cmd.Process.Pid)
}

func TestWaitWorkerSaysWhatTheDaemonIsDoing(t *testing.T) {
	s, err := start(t, "backoff")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = s.WaitWorker(ctx)
	if err == nil || !strings.Contains(err.Error(), "state backoff, 3 hellos (3 failed), next try in 1.5s") {
		t.Fatalf("WaitWorker = %v, want the daemon's state from its introspection server", err)
	}
}

func TestServeThatDiesIsReported(t *testing.T) {
	_, err := start(t, "crash")
	if err == nil || !strings.Contains(err.Error(), "serve exited before it was healthy") || !strings.Contains(err.Error(), "cannot open data dir") {
		t.Fatalf("Start = %v, want serve's exit and its log", err)
	}
}

func TestChildrenDieWithTheParent(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to see children's state")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FAKE_NYMPH=parent", "FAKE_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var servePid, daemonPid int
	if _, err := fmt.Fscan(out, &servePid, &daemonPid); err != nil {
		cmd.Process.Kill()
		t.Fatalf("parent did not report its children: %v", err)
	}
	cmd.Process.Kill() // SIGKILL: no cleanup runs in the parent
	cmd.Wait()
	testkit.WaitExited(t, 20*time.Second, servePid, daemonPid)
}

func TestSetupOutputFromDaemonLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "daemon.log")
	os.WriteFile(log, []byte(`time=x level=INFO msg="child output" invocation_id=setup-c1 runner=process stream=stdout line="hello \"there\""
time=x level=INFO msg="child output" invocation_id=setup-c2 runner=process stream=stdout line=other
time=x level=INFO msg="child output" invocation_id=setup-c1 runner=process stream=stderr line=plain
time=x level=INFO msg="child ended" invocation_id=setup-c1 runner=process status="exit status 0"
`), 0o600)
	got := setupOutput(log, "setup-c1")
	if len(got) != 2 || got[0] != `hello "there"` || got[1] != "plain" {
		t.Fatalf("setupOutput = %q", got)
	}
	if setupOutput(filepath.Join(t.TempDir(), "none"), "setup-c1") != nil {
		t.Fatal("missing log gave output")
	}
}
