package testscripts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
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

	"github.com/tinylib/msgp/msgp"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

// TestTrustForgeries runs the attacks a holder of the shared bearer, or of
// one host's key, would try against a real nymph serve on TLS, with hosts
// joined by the real `nymph daemon join`, and checks each is refused with
// its status and code while the victim keeps its worker and its work:
// a hello with another host's machine_id, a poll naming another worker, a
// forged exec result and setup ack for another worker's work, a replayed
// request, a stale timestamp, a wrong audience, two hosts racing on one
// token, and the enrolment rate limit.
func TestTrustForgeries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nymph serve and joins hosts")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("the daemon runs setups under bash")
	}
	h := startTrustHost(t)
	a := h.join(t, "a")
	b := h.join(t, "b")
	h.startDaemon(t, b)
	h.ctlOK(t, "wait", "b", "--state", "active")

	// B's secret exec, queued while B is busy with a long setup, so it
	// waits in B's queue for the attacks below.
	started := filepath.Join(h.dir, "setup-started")
	setupOut := h.ctlOK(t, "setup", "b", "--script", h.file(t, "slow.sh", "touch "+started+"\nsleep 10\n"), "--name", "slow")
	setupID := firstMatch(t, setupOut, `queued setup (\S+)`)
	// The setup is in flight on b (delivered, not acked) once it runs.
	waitForFile(t, started)
	execOut := h.ctlOK(t, "exec", "b", "--detach", "--env", "SECRET=hunter2", "--", "echo $SECRET")
	execID := strings.TrimSpace(execOut)

	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+h.daemonToken) }
	asA := func(r *http.Request) { h.sign(t, r, a.key, time.Now(), "") }

	cases := []struct {
		name   string
		path   string
		body   []byte
		auth   func(*http.Request)
		status int
		code   string
	}{
		{"bearer poll as b", wire.PathPoll, pollFor(b.workerID), bearer, 401, "signature_required"},
		{"a's key polls as b", wire.PathPoll, pollFor(b.workerID), asA, 403, "worker_mismatch"},
		{"bearer result of b's exec", wire.PathExecResult(execID), forgedResult(), bearer, 401, "signature_required"},
		{"a's key posts b's exec result", wire.PathExecResult(execID), forgedResult(), asA, 403, "worker_mismatch"},
		{"bearer setup ack of b", wire.PathAck, setupAck(b.workerID, setupID), bearer, 401, "signature_required"},
		{"a's key acks b's setup", wire.PathAck, setupAck(b.workerID, setupID), asA, 403, "worker_mismatch"},
		{"a's key acks b's setup as a", wire.PathAck, setupAck(a.workerID, setupID), asA, 403, "worker_mismatch"},
		{"bearer hello as b", wire.PathHello, helloFor("b", nil), bearer, 200, wire.RejectEnrollSignatureRequired},
		{"a's key says hello as b with b's public key", wire.PathHello, helloFor("b", &b.pub), asA, 200, wire.RejectKeyIDMismatch},
		{"a's key says hello as b with its own", wire.PathHello, helloFor("b", &a.pub), asA, 200, wire.RejectEnrollTokenRequired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := h.post(t, c.path, c.body, c.auth)
			if status != c.status || !bytes.Contains(body, []byte(c.code)) {
				t.Fatalf("status %d body %s; want %d with %q", status, truncateForLog(body), c.status, c.code)
			}
		})
	}
	if log := readLog(h.dir, "serve.log"); !strings.Contains(log, b.workerID) || !strings.Contains(log, a.workerID) {
		t.Errorf("serve did not log the forgeries with both worker ids:\n%s", log)
	}

	t.Run("replay, stale timestamp, wrong audience", func(t *testing.T) {
		body := pollFor(a.workerID)
		now := time.Now()
		var first *http.Request
		status, resp := h.post(t, wire.PathPoll, body, func(r *http.Request) { h.sign(t, r, a.key, now, ""); first = r })
		if status != 200 {
			t.Fatalf("a's own poll: %d %s", status, truncateForLog(resp))
		}
		status, resp = h.post(t, wire.PathPoll, body, func(r *http.Request) { r.Header = first.Header.Clone() })
		if status != 401 || !bytes.Contains(resp, []byte("nonce_replayed")) {
			t.Errorf("replay: %d %s", status, truncateForLog(resp))
		}
		status, resp = h.post(t, wire.PathPoll, body, func(r *http.Request) { h.sign(t, r, a.key, now.Add(-2*identity.Window), "") })
		if status != 401 || !bytes.Contains(resp, []byte("signature_expired")) {
			t.Errorf("stale timestamp: %d %s", status, truncateForLog(resp))
		}
		status, resp = h.post(t, wire.PathPoll, body, func(r *http.Request) { h.sign(t, r, a.key, now, "https://other.example:8383") })
		if status != 401 || !bytes.Contains(resp, []byte("wrong_audience")) {
			t.Errorf("wrong audience: %d %s", status, truncateForLog(resp))
		}
	})

	// The victim is untouched: its exec, with its secret, runs on b once
	// the setup is done, and nowhere else.
	h.ctlOK(t, "wait", "b", "--state", "active", "--timeout", "60s")
	out := h.ctlOK(t, "logs", execID, "--follow")
	if strings.TrimSpace(out) != "hunter2" {
		t.Errorf("b's exec printed %q", out)
	}

	t.Run("two hosts race on one token", func(t *testing.T) {
		token := h.token(t)
		var wg sync.WaitGroup
		results := make([]string, 2)
		codes := make([]int, 2)
		for i, m := range []string{"race1", "race2"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], codes[i] = h.runJoin(t, m, token)
			}()
		}
		wg.Wait()
		won := 0
		for i := range results {
			switch {
			case codes[i] == 0:
				won++
			case codes[i] == 2 && strings.Contains(results[i], wire.RejectEnrollTokenConsumed):
			default:
				t.Errorf("join %d: exit %d: %s", i, codes[i], results[i])
			}
		}
		if won != 1 {
			t.Fatalf("%d joins won the token, want 1: %q", won, results)
		}
	})

	t.Run("enrolment rate limit", func(t *testing.T) {
		// The limit is 10 a minute in fixed windows; the joins so far (a, b,
		// two racers) may have fallen in this window or the last. Keep the
		// attempts inside one window: at most the 11th of them is refused.
		if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 3*time.Second {
			time.Sleep(left + 100*time.Millisecond)
		}
		var got []int
		for i := 0; i < 12; i++ {
			status, resp, hdr := h.postFull(t, wire.PathHello, helloFor(fmt.Sprintf("rl%d", i), &a.pub), func(r *http.Request) {
				r.Header.Set(identity.HeaderEnrollToken, strings.Repeat("0", 64))
			})
			got = append(got, status)
			if status == 429 {
				if hdr.Get("Retry-After") != "60" {
					t.Errorf("429 with Retry-After %q, want 60", hdr.Get("Retry-After"))
				}
				if !bytes.Contains(resp, []byte("enroll_rate_limited")) {
					t.Errorf("429 body %s", truncateForLog(resp))
				}
				if i > 10 {
					t.Errorf("refused only at attempt %d; the limit is 10 a minute", i+1)
				}
				return
			}
		}
		t.Fatalf("no 429 after %d enrolling hellos: %v", len(got), got)
	})
}

// trustHost is a nymph serve on TLS with a bearer, for the trust tests.
type trustHost struct {
	dir, addr, url, caFile   string
	daemonToken, adminTokenF string
	client                   *http.Client
}

// joinedHost is one host joined with a token.
type joinedHost struct {
	machine, dir, config, workerID string
	key                            ed25519.PrivateKey
	pub                            string
}

func startTrustHost(t *testing.T) *trustHost {
	t.Helper()
	dir := t.TempDir()
	h := &trustHost{dir: dir, daemonToken: "shared-daemon-bearer", adminTokenF: filepath.Join(dir, "admin.token")}
	writeFile(t, filepath.Join(dir, "daemon.token"), h.daemonToken+"\n", 0o600)
	writeFile(t, h.adminTokenF, "trust-admin-secret\n", 0o600)
	h.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freeLoopbackPort(t)))
	h.url = "https://" + h.addr
	h.caFile = filepath.Join(dir, "data", "tls", "ca.crt")
	startProcess(t, dir, "serve.log", nil, "serve", "--listen", h.addr, "--data-dir", filepath.Join(dir, "data"),
		"--token-file", filepath.Join(dir, "daemon.token"), "--admin-token-file", h.adminTokenF)
	deadline := time.Now().Add(waitDeadline)
	for {
		if _, err := os.Stat(h.caFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve wrote no CA; its log:\n%s", readLog(dir, "serve.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	pem, err := os.ReadFile(h.caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	h.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}}}
	for {
		if resp, err := h.client.Get(h.url + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve is not healthy; its log:\n%s", readLog(dir, "serve.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return h
}

// startProcess runs the nymph binary with args and env, its output to a
// log in dir, and stops it (SIGTERM, then SIGKILL) when the test ends.
func startProcess(t *testing.T, dir, logName string, env []string, args ...string) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "nymph"), args...)
	cmd.Env = append(append(os.Environ(), "NYMPH_CLOUD_METADATA=off"), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscallTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
	})
}

func (h *trustHost) nymph(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "nymph"), args...)
	cmd.Env = append(os.Environ(), "NYMPH_SERVER="+h.url, "NYMPH_ADMIN_TOKEN_FILE="+h.adminTokenF,
		"NYMPH_CA_FILE="+h.caFile, "NYMPH_CLOUD_METADATA=off")
	return cmd
}

// ctlOK runs nymph ctl and returns its stdout; a failure fails the test.
func (h *trustHost) ctlOK(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := h.nymph(ctx, append([]string{"ctl"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nymph ctl %s: %v\n%s%s\nserve log:\n%s", strings.Join(args, " "), err, out, stderr.Bytes(), readLog(h.dir, "serve.log"))
	}
	return string(out)
}

func (h *trustHost) file(t *testing.T, name, content string) string {
	path := filepath.Join(h.dir, name)
	writeFile(t, path, content, 0o644)
	return path
}

// token mints a join token and returns the --token value of the line
// ctl prints.
func (h *trustHost) token(t *testing.T) string {
	t.Helper()
	line := strings.TrimSpace(h.ctlOK(t, "token", "--ttl", "5m"))
	m := regexp.MustCompile(`^nymph daemon join --server (\S+) --token ([0-9a-f]{64}\.[0-9a-f]{64})$`).FindStringSubmatch(line)
	if m == nil || m[1] != h.url {
		t.Fatalf("ctl token printed %q, want the join line for %s", line, h.url)
	}
	return m[2]
}

// runJoin runs nymph daemon join for machine with token and returns its
// output and exit code.
func (h *trustHost) runJoin(t *testing.T, machine, token string) (string, int) {
	dir := filepath.Join(h.dir, machine)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "daemon.toml")
	writeFile(t, config, fmt.Sprintf("[daemon]\nmachine_id = %q\n\n[runtime]\nkeep_alive_s = -1\n\n[poll]\nretry_min_s = 0.1\nretry_max_s = 0.5\n", machine), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := h.nymph(ctx, "daemon", "join", "--server", h.url, "--token", token, "--config", config,
		"--workdir", filepath.Join(dir, "work")).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func (h *trustHost) join(t *testing.T, machine string) *joinedHost {
	t.Helper()
	out, code := h.runJoin(t, machine, h.token(t))
	if code != 0 {
		t.Fatalf("join %s: exit %d: %s", machine, code, out)
	}
	dir := filepath.Join(h.dir, machine)
	j := &joinedHost{machine: machine, dir: dir, config: filepath.Join(dir, "daemon.toml")}
	j.workerID = firstMatch(t, out, `worker (\S+)`)
	seed, err := os.ReadFile(filepath.Join(dir, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	if j.key, err = identity.DecodeSeed(seed); err != nil {
		t.Fatal(err)
	}
	j.pub = identity.EncodePublicKey(j.key.Public().(ed25519.PublicKey))
	return j
}

func (h *trustHost) startDaemon(t *testing.T, j *joinedHost) {
	startProcess(t, j.dir, "daemon.log", nil, "daemon", "--config", j.config)
}

// sign signs r (whose body is in r.GetBody) with key at ts for audience
// (the server's origin when "").
func (h *trustHost) sign(t *testing.T, r *http.Request, key ed25519.PrivateKey, ts time.Time, audience string) {
	t.Helper()
	if audience == "" {
		audience = h.url
	}
	body, _ := r.GetBody()
	raw, _ := io.ReadAll(body)
	var nonce [identity.NonceBytes]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		t.Fatal(err)
	}
	s := identity.Signature{KeyID: identity.KeyID(key.Public().(ed25519.PublicKey)), Timestamp: ts.Unix(),
		Nonce: identity.EncodeNonce(nonce[:]), Audience: audience}
	identity.Sign(key, identity.NewRequest("POST", r.URL.Path, raw), &s)
	for k, v := range s.Header() {
		r.Header.Set(k, v)
	}
}

func (h *trustHost) post(t *testing.T, path string, body []byte, auth func(*http.Request)) (int, []byte) {
	status, resp, _ := h.postFull(t, path, body, auth)
	return status, resp
}

func (h *trustHost) postFull(t *testing.T, path string, body []byte, auth func(*http.Request)) (int, []byte, http.Header) {
	t.Helper()
	r, err := http.NewRequest("POST", h.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/x-msgpack")
	if auth != nil {
		auth(r)
	}
	resp, err := h.client.Do(r)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp.Header
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, waitDeadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func firstMatch(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q holds nothing like %s", s, re)
	}
	return m[len(m)-1]
}

func pollFor(workerID string) []byte {
	b := msgp.AppendMapHeader(nil, 5)
	b = msgp.AppendString(b, "worker_id")
	b = msgp.AppendString(b, workerID)
	b = msgp.AppendString(b, "queue")
	b = msgp.AppendString(b, "default")
	b = msgp.AppendString(b, "timeout_s")
	b = msgp.AppendFloat64(b, 0)
	b = msgp.AppendString(b, "cursor")
	b = msgp.AppendNil(b)
	b = msgp.AppendString(b, "invocations")
	return msgp.AppendArrayHeader(b, 0)
}

func forgedResult() []byte {
	body, _ := (&wire.ExecResult{ExitCode: 0, Stdout: "forged", DurationMS: 1}).MarshalMsg(nil)
	return body
}

func setupAck(workerID, commandID string) []byte {
	body, _ := (&wire.Ack{InvocationID: wire.SetupInvocationID(commandID), WorkerID: workerID, State: wire.StateSucceeded}).MarshalMsg(nil)
	return body
}

func helloFor(machine string, pub *string) []byte {
	proto, daemonV := wire.ProtocolVersion, "0.0.0-forger"
	h := wire.HelloRequest{MachineID: machine, Label: "forger", Tags: []string{}, PublicKey: pub,
		Capabilities: wire.Capabilities{Runners: []string{"process"}},
		Versions:     wire.Versions{Protocol: &proto, Daemon: &daemonV}}
	body, _ := h.MarshalMsg(nil)
	return body
}
