package testscripts

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/rogpeppe/go-internal/testscript"
)

// binDir holds the nymph binary built once for every script.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nymph-testscripts-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "nymph"), "../cmd/nymph")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "testscripts: build nymph:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: false,
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", binDir+string(os.PathListSeparator)+env.Getenv("PATH"))
			env.Setenv("NYMPH_TEST_BIN", filepath.Join(binDir, "nymph"))
			// Tests reach loopback only: no cloud metadata probes at daemon boot.
			env.Setenv("NYMPH_CLOUD_METADATA", "off")
			// The engine_* scripts reach the real engines through these
			// (eval "$(bash .ci/engines.sh env)").
			for _, k := range []string{"DOCKER_HOST", "SLURM_CONF", "NYMPH_TEST_SLURM", "NYMPH_TEST_DOCKER_IMAGE", "NYMPH_TEST_RUNSC"} {
				if v, ok := os.LookupEnv(k); ok {
					env.Setenv(k, v)
				}
			}
			return nil
		},
		// [env:NAME] holds when NAME is set and not empty.
		Condition: func(cond string) (bool, error) {
			if name, ok := strings.CutPrefix(cond, "env:"); ok {
				return os.Getenv(name) != "", nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfor":   cmdWaitFor,
			"waitmatch": cmdWaitMatch,
			"freeport":  cmdFreePort,
			"sigterm":   cmdSigterm,
			"httppost":  cmdHTTPPost,
		},
	})
}

// waitDeadline bounds every readiness wait; a wait that needs longer is a bug.
const waitDeadline = 60 * time.Second

// cmdWaitFor waits until a URL answers 2xx (http:// or https://) or a
// file exists. An https server is verified as nymph ctl verifies it: by
// the CA file $NYMPH_CA_FILE names (which serve writes before it
// listens), else by the system's roots.
//
//	waitfor https://127.0.0.1:$PORT/healthz
//	waitfor $WORK/relay.ready
func cmdWaitFor(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: waitfor URL|FILE")
	}
	target := args[0]
	ok := func() bool {
		if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
			hc, err := scriptClient(ts, target, 5*time.Second)
			if err != nil {
				return false
			}
			defer hc.CloseIdleConnections()
			resp, err := hc.Get(target)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode/100 == 2
		}
		_, err := os.Stat(ts.MkAbs(target))
		return err == nil
	}
	poll(ts, neg, "waitfor "+target, ok)
}

// scriptClient is an HTTP client for url that verifies an https server by
// the script's $NYMPH_CA_FILE (the system's roots when it is unset), at
// TLS 1.3, as every nymph client does.
func scriptClient(ts *testscript.TestScript, url string, timeout time.Duration) (*http.Client, error) {
	if !strings.HasPrefix(url, "https://") {
		return &http.Client{Timeout: timeout}, nil
	}
	caFile := ts.Getenv("NYMPH_CA_FILE")
	if caFile != "" {
		caFile = ts.MkAbs(caFile)
	}
	cfg, err := tlsca.ClientConfig(caFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// cmdWaitMatch waits until FILE contains a line matching REGEX [COUNT times].
//
//	waitmatch daemon.log 'state=polling'
//	waitmatch daemon.log 'exec finished' 3
func cmdWaitMatch(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 && len(args) != 3 {
		ts.Fatalf("usage: waitmatch FILE REGEX [COUNT]")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	want := 1
	if len(args) == 3 {
		want, err = strconv.Atoi(args[2])
		ts.Check(err)
	}
	path := ts.MkAbs(args[0])
	poll(ts, neg, "waitmatch "+args[0]+" "+args[1], func() bool {
		f, err := os.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		n := 0
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if re.Match(sc.Bytes()) {
				n++
			}
		}
		return n >= want
	})
}

func poll(ts *testscript.TestScript, neg bool, what string, ok func() bool) {
	deadline := time.Now().Add(waitDeadline)
	for time.Now().Before(deadline) {
		if ok() != neg {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("%s: not reached after %s", what, waitDeadline)
}

// handedOut holds every port freeport has given to any script of this run,
// so two calls in a row (a serve port and a status port) never name the
// same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// cmdFreePort sets VAR to a free loopback TCP port that no script of this run
// has been given before. The port comes from below the kernel's ephemeral
// range: a port from ":0" is free only until the next outgoing connection
// (a daemon dialling serve) takes it as its source port, which can happen
// before the script's server binds it.
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: freeport VAR")
	}
	port, err := freePort()
	if err != nil {
		ts.Fatalf("freeport: %v", err)
	}
	ts.Setenv(args[0], strconv.Itoa(port))
}

// freePort picks a free loopback port below the ephemeral range that no
// script or test of this run has been given before (see cmdFreePort).
func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	lo, hi := 20000, ephemeralLow()
	for range 256 {
		port := lo + rand.IntN(hi-lo)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port in [%d, %d) after 256 tries", lo, hi)
}

// ephemeralLow is the first port the kernel may pick as a source port, or
// 32768 (Linux's default) when it cannot be read or leaves no room below
// it; freeport's bind check and handedOut still hold then.
func ephemeralLow() int {
	const fallback = 32768
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return fallback
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= 21000 {
		return fallback
	}
	return low
}

// cmdSigterm sends SIGTERM to the pid written in PIDFILE (testscript's own
// kill knows only INT and KILL).
func cmdSigterm(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sigterm PIDFILE")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	ts.Check(err)
	p, err := os.FindProcess(pid)
	ts.Check(err)
	ts.Check(p.Signal(syscallTERM))
}
