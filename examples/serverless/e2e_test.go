// It starts node and nymph, processes of the host: it is not built under
// wasm, where internal/testkit's process helpers do not exist.

//go:build !js && !wasip1

package serverless_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/operator"
)

const adminToken, daemonToken = "admin-secret-sls", "daemon-secret-sls"

// The real nymph daemon against plane.js, the wasm core behind Node's
// http module, once with each build of the core (js/wasm and the wasip1
// reactor): its hello registers a worker, an exec queued through the
// JavaScript plane runs, and its result is recorded there.
func TestDaemonAgainstJavaScriptPlane(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: plane.js needs it")
	}
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("bash is needed: the daemon runs execs under it")
	}
	bin := t.TempDir()
	nymph := filepath.Join(bin, "nymph")
	planes := []struct {
		name, pkg string
		env       []string // go build's
		flags     []string // go build's
		args      []string // plane.js's
	}{
		{"js", "./planewasm", []string{"GOOS=js", "GOARCH=wasm"}, nil, nil},
		{"wasip1", "./planewasi", []string{"GOOS=wasip1", "GOARCH=wasm"}, []string{"-buildmode=c-shared"}, []string{"--wasi"}},
	}
	var wg sync.WaitGroup
	build := func(out, pkg string, env, flags []string) {
		wg.Go(func() {
			cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, pkg)...)
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("go build %s: %v\n%s", pkg, err, out)
			}
		})
	}
	build(nymph, "../../cmd/nymph", nil, nil)
	for _, p := range planes {
		build(filepath.Join(bin, p.name+".wasm"), p.pkg, p.env, p.flags)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	script, err := filepath.Abs("plane.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			daemonAgainstPlane(t, nymph, filepath.Join(bin, p.name+".wasm"), append([]string{node, script}, p.args...))
		})
	}
}

// daemonAgainstPlane runs plane.js (the command line planeJS) on the core
// in wasm and the nymph daemon against it, and queues an exec through it.
func daemonAgainstPlane(t *testing.T, nymph, wasm string, planeJS []string) {
	dir := t.TempDir()
	planeLog, daemonLog := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	t.Cleanup(func() { // runs last, once both have stopped
		if t.Failed() {
			t.Logf("plane.js output:\n%s\nnymph daemon output:\n%s", planeLog, daemonLog)
		}
	})
	plane := start(t, "plane.js", planeLog, []string{"PLANE_WASM=" + wasm, "LISTEN=127.0.0.1:0",
		"STATE_FILE=" + filepath.Join(dir, "state.json"), "ADMIN_TOKEN=" + adminToken, "DAEMON_TOKEN=" + daemonToken},
		planeJS[0], planeJS[1:]...)
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	var url string
	waitUntil(t, 20*time.Second, "plane.js to listen", func() bool {
		if m := listening.FindStringSubmatch(planeLog.String()); m != nil {
			url = m[1]
		}
		return url != "" || plane.ended()
	})
	if url == "" {
		t.Fatal("plane.js ended before it listened")
	}

	tokenFile, config := filepath.Join(dir, "daemon.token"), filepath.Join(dir, "daemon.toml")
	writeFile(t, tokenFile, daemonToken+"\n")
	writeFile(t, config, `[daemon]
machine_id = "sls-1"
label = "serverless e2e"

[runtime]
keep_alive_s = -1
max_invocations = 2

[poll]
retry_min_s = 0.1
retry_max_s = 0.5
`)
	start(t, "nymph daemon", daemonLog, []string{"NYMPH_CLOUD_METADATA=off"}, nymph, "daemon", "--config", config,
		"--server", url, "--token-file", tokenFile, "--workdir", filepath.Join(dir, "work"))

	admin := func(method, path string, body, into any) {
		t.Helper()
		var in io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			in = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, url+path, in)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s %s", method, path, resp.Status, raw)
		}
		if err := json.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}

	var workerID string
	waitUntil(t, 20*time.Second, "the daemon's hello", func() bool {
		var workers []operator.Worker
		admin("GET", operator.PathWorkers, nil, &workers)
		for _, w := range workers {
			if w.MachineID == "sls-1" {
				workerID = w.ID
			}
		}
		return workerID != ""
	})

	var accepted operator.ExecAccepted
	admin("POST", strings.Replace(operator.PathExec, "{id}", workerID, 1), operator.ExecRequest{Command: "echo hello"}, &accepted)
	var status operator.ExecStatus
	waitUntil(t, 20*time.Second, "the exec's result", func() bool {
		admin("GET", strings.Replace(operator.PathExecStatus, "{id}", accepted.ExecID, 1), nil, &status)
		return status.State == "finished"
	})
	if r := status.Result; r == nil || r.ExitCode != 0 || r.Stdout != "hello\n" || r.Error != nil {
		t.Fatalf("exec %s recorded as %+v", accepted.ExecID, r)
	}
}

// proc is a process of the test.
type proc struct{ exited chan struct{} }

func (p *proc) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// start runs name with env added to the test's, its output in log, and
// interrupts it (then kills it) when the test ends.
func start(t *testing.T, what string, log io.Writer, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	p := &proc{exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
			t.Logf("%s did not end within 5s of an interrupt: killed", what)
		}
	})
	return p
}

// waitUntil returns once cond holds, and fails the test when it has not
// within the bound.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(fmt.Errorf("write %s: %w", name, err))
	}
}
