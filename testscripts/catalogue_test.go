package testscripts

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/wire"
)

// TestBadInputCatalogue sends a real nymph serve, over loopback, the
// requests a hostile or broken client would: bodies past their limits,
// truncated msgpack, length headers announcing gigabytes at every level
// of a hello, deep nesting, wrong types, NaN and infinities, invalid
// UTF-8, control characters and terminal escapes, trickled and stalled
// bodies, and a few hundred connections that never send a request. Each
// must be answered as docs/protocol.md ("Limits and timeouts") says,
// within the bound it gives, while a real daemon and a plain hello+poll
// client keep working against the same serve, and serve's memory stays
// bounded.
func TestBadInputCatalogue(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nymph serve and a daemon for about a minute")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("the daemon runs execs under bash")
	}
	h := startCatalogueHost(t)

	idle := readMemory(t, h.servePid)
	t.Logf("serve memory at idle: VmRSS %d KiB, VmHWM %d KiB", idle.rssKiB, idle.hwmKiB)

	stopLoop := h.startHelloPollLoop(t)

	t.Run("cases", func(t *testing.T) {
		for _, c := range catalogue(t, h) {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				got := h.roundTrip(c)
				t.Logf("%s: status %d after %s: %s", c.name, got.status, got.elapsed.Round(time.Millisecond), truncateForLog(got.body))
				if got.err != nil {
					t.Fatalf("no answer after %s: %v", got.elapsed, got.err)
				}
				if got.status != c.want {
					t.Errorf("status %d, want %d; body %s", got.status, c.want, truncateForLog(got.body))
				}
				if got.elapsed > c.within {
					t.Errorf("answered after %s, the bound is %s", got.elapsed, c.within)
				}
				if c.wantBody != "" && !bytes.Contains(got.body, []byte(c.wantBody)) {
					t.Errorf("body %s does not name %q", truncateForLog(got.body), c.wantBody)
				}
				h.checkAlive(t)
			})
		}
		t.Run("idle connections", func(t *testing.T) {
			t.Parallel()
			h.idleConnections(t, 300)
		})
	})

	loops, loopFailures := stopLoop()
	t.Logf("hello+poll client alongside: %d rounds, %d failed", loops, len(loopFailures))
	if len(loopFailures) > 0 {
		t.Errorf("the hello+poll client alongside failed %d times; first: %s", len(loopFailures), loopFailures[0])
	}
	if loops == 0 {
		t.Error("the hello+poll client alongside never completed a round")
	}

	// The daemon, which kept polling through all of it, still runs what
	// the operator queues.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h.ctl(ctx, "exec", "m1", "--", "echo catalogue-survived").Output()
	if err != nil {
		t.Fatalf("ctl exec after the catalogue: %v (stdout %q)", err, out)
	}
	if strings.TrimSpace(string(out)) != "catalogue-survived" {
		t.Fatalf("ctl exec after the catalogue printed %q", out)
	}

	after := readMemory(t, h.servePid)
	t.Logf("serve memory after the catalogue: VmRSS %d KiB, VmHWM %d KiB (idle VmRSS %d KiB, peak %+d KiB over it)",
		after.rssKiB, after.hwmKiB, idle.rssKiB, after.hwmKiB-idle.rssKiB)
	const memoryHeadroomKiB = 64 << 10
	if after.hwmKiB > idle.rssKiB+memoryHeadroomKiB {
		t.Errorf("serve's peak VmRSS %d KiB is more than 64 MiB over its idle %d KiB", after.hwmKiB, idle.rssKiB)
	}
}

// badRequest is one entry of the catalogue.
type badRequest struct {
	name string
	path string
	// body is sent with its Content-Length, unless send is set.
	body []byte
	// send, when set, writes the request after the request line and
	// Host header: headers, blank line, body, at its own pace.
	send     func(w io.Writer) error
	want     int
	wantBody string        // a substring the answer must hold
	within   time.Duration // the bound the answer must come within
}

// promptly bounds the answer to a request whose bytes all arrive at once.
const promptly = 15 * time.Second

func catalogue(t *testing.T, h *catalogueHost) []badRequest {
	// A worker of its own answers the polls of the NaN and infinity
	// cases, so nothing else the catalogue sends disturbs it.
	pollWorker := h.hello(t, "catalogue-nan")

	helloAt := func(name string, body []byte, want int, wantBody string) badRequest {
		return badRequest{name: name, path: wire.PathHello, body: body, want: want, wantBody: wantBody, within: promptly}
	}
	valid := helloBody("catalogue-case", nil, nil, nil)

	// An ack as large as the route takes, bar a little room for its keys.
	bigAck := mapOf(kv{"invocation_id", str("catalogue-no-such-invocation")}, kv{"state", str(wire.StateSucceeded)},
		kv{"result_blob", msgp.AppendBytes(nil, bytes.Repeat([]byte{'r'}, wire.MaxResultBodyBytes-1024))}, kv{"error", msgp.AppendNil(nil)})
	cases := []badRequest{
		// Bodies past their route's limit: by Content-Length, refused
		// before any of it is read, and chunked, cut off at the limit.
		{name: "hello Content-Length past 1 MiB", path: wire.PathHello, want: 413, within: promptly,
			send: headersOnly(wire.MaxControlBodyBytes + 1)},
		{name: "ack Content-Length past 16 MiB", path: wire.PathAck, want: 413, within: promptly,
			send: headersOnly(wire.MaxResultBodyBytes + 1)},
		{name: "log chunk Content-Length past 8 MiB", path: "/v1/daemon/exec/catalogue-exec/chunk", want: 413, within: promptly,
			send: headersOnly(wire.MaxChunkBodyBytes + 1)},
		{name: "hello chunked past 1 MiB", path: wire.PathHello, want: 413, within: promptly,
			send: chunked(wire.MaxControlBodyBytes + 64<<10)},
		{name: "ack chunked past 16 MiB", path: wire.PathAck, want: 413, within: promptly,
			send: chunked(wire.MaxResultBodyBytes + 64<<10)},
		{name: "exec result chunked past 16 MiB", path: "/v1/daemon/exec/catalogue-exec/result", want: 413, within: promptly,
			send: chunked(wire.MaxResultBodyBytes + 64<<10)},
		// Signature headers a forger or a broken signer sends: each is
		// refused on the headers, 401, before a byte of the body is read
		// (the body announced is past any route's limit and never sent).
		{name: "signature headers, some missing", path: wire.PathPoll, want: 401, wantBody: "malformed_signature", within: promptly,
			send: withHeaders(wire.MaxResultBodyBytes, "X-LS-Key-Id: ed25519-"+strings.Repeat("0", 32), "X-LS-Signature: x")},
		{name: "signature headers, a timestamp not in digits", path: wire.PathPoll, want: 401, wantBody: "malformed_signature", within: promptly,
			send: withHeaders(wire.MaxResultBodyBytes, signedHeaders("1e9")...)},
		{name: "signature headers, a timestamp a day old", path: wire.PathPoll, want: 401, wantBody: "signature_expired", within: promptly,
			send: withHeaders(wire.MaxResultBodyBytes, signedHeaders(strconv.FormatInt(time.Now().Add(-24*time.Hour).Unix(), 10))...)},
		{name: "signature headers, a key id 4 KiB long", path: wire.PathPoll, want: 401, wantBody: "malformed_signature", within: promptly,
			send: withHeaders(wire.MaxResultBodyBytes, append(signedHeaders(strconv.FormatInt(time.Now().Unix(), 10))[1:], "X-LS-Key-Id: "+strings.Repeat("k", 4096))...)},
		// Bodies just inside the limit, well formed but for no known
		// invocation: read whole, two at a time (the large-body slots),
		// the rest waiting their turn, within the memory bound.
		{name: "16 MiB ack for an unknown invocation (1 of 2)", path: wire.PathAck, body: bigAck, want: 404, wantBody: "unknown_invocation", within: promptly},
		{name: "16 MiB ack for an unknown invocation (2 of 2)", path: wire.PathAck, body: bigAck, want: 404, wantBody: "unknown_invocation", within: promptly},
		{name: "16 MiB ack for an unknown invocation, chunked", path: wire.PathAck, want: 404, wantBody: "unknown_invocation", within: promptly,
			send: chunkedBody(bigAck)},
		{name: "header block past 64 KiB", path: wire.PathHello, want: 431, within: promptly,
			send: func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "X-Padding: %s\r\nContent-Length: 0\r\n\r\n", strings.Repeat("p", wire.MaxHeaderBytes+8<<10))
				return err
			}},

		// Truncated msgpack.
		helloAt("hello cut in half", valid[:len(valid)/2], 400, ""),
		helloAt("hello missing its last byte", valid[:len(valid)-1], 400, ""),
		helloAt("empty hello", nil, 400, ""),
		{name: "poll cut in half", path: wire.PathPoll, body: pollBody(pollWorker, 0)[:20], want: 400, within: promptly},

		// Length headers announcing 4 Gi entries or bytes, at every level
		// of a hello, followed by nothing.
		helloAt("hello map of 2^32-1 entries", hugeMap(), 400, ""),
		helloAt("hello map of 2^24 entries", []byte{0xdf, 0x01, 0x00, 0x00, 0x00}, 400, ""),
		helloAt("machine_id str of 2^32-1 bytes", truncatedAt(kv{"machine_id", hugeStr()}), 400, ""),
		helloAt("label str of 2^32-1 bytes", truncatedAt(kv{"machine_id", str("catalogue-case")}, kv{"label", hugeStr()}), 400, ""),
		helloAt("tags array of 2^32-1 entries", truncatedAt(kv{"machine_id", str("catalogue-case")}, kv{"label", str("")}, kv{"tags", hugeArray()}), 400, ""),
		helloAt("tag str of 2^32-1 bytes", truncatedAt(kv{"machine_id", str("catalogue-case")}, kv{"label", str("")}, kv{"tags", append([]byte{0x91}, hugeStr()...)}), 400, ""),
		helloAt("capabilities map of 2^32-1 entries", truncatedAt(helloHead(kv{"capabilities", hugeMap()})...), 400, ""),
		helloAt("capabilities.runners array of 2^32-1 entries", truncatedAt(helloHead(kv{"capabilities", mapOf(kv{"runners", hugeArray()})})...), 400, ""),
		helloAt("capabilities.runners entry of 2^32-1 bytes", truncatedAt(helloHead(kv{"capabilities", mapOf(kv{"runners", append([]byte{0x91}, hugeStr()...)})})...), 400, ""),
		helloAt("versions map of 2^32-1 entries", truncatedAt(helloHead(kv{"capabilities", capabilities(nil)}, kv{"versions", hugeMap()})...), 400, ""),
		helloAt("versions.cpu map of 2^32-1 entries", truncatedAt(helloHead(kv{"capabilities", capabilities(nil)}, kv{"versions", mapOf(kv{"cpu", hugeMap()})})...), 400, ""),
		helloAt("versions.gpu array of 2^32-1 entries", truncatedAt(helloHead(kv{"capabilities", capabilities(nil)}, kv{"versions", mapOf(kv{"gpu", hugeArray()})})...), 400, ""),
		helloAt("versions.daemon str of 2^32-1 bytes", truncatedAt(helloHead(kv{"capabilities", capabilities(nil)}, kv{"versions", mapOf(kv{"daemon", hugeStr()})})...), 400, ""),
		helloAt("unknown key's bin of 2^32-1 bytes", truncatedAt(kv{"machine_id", str("catalogue-case")}, kv{"extra", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}}), 400, ""),
		{name: "poll map of 2^32-1 entries", path: wire.PathPoll, body: hugeMap(), want: 400, within: promptly},
		{name: "poll invocations array of 2^32-1 entries", path: wire.PathPoll,
			body: truncatedAt(kv{"worker_id", str(pollWorker)}, kv{"queue", str("default")}, kv{"timeout_s", msgp.AppendFloat64(nil, 0)}, kv{"invocations", hugeArray()}), want: 400, within: promptly},
		{name: "ack map of 2^32-1 entries", path: wire.PathAck, body: hugeMap(), want: 400, within: promptly},
		{name: "exec result map of 2^32-1 entries", path: "/v1/daemon/exec/catalogue-exec/result", body: hugeMap(), want: 400, within: promptly},

		// Deep nesting: 10,000 arrays inside one another, as the whole
		// body and in place of the tags.
		helloAt("hello of 10,000 nested arrays", nestedArrays(10000), 400, ""),
		helloAt("tags of 10,000 nested arrays", helloBody("catalogue-case", map[string][]byte{"tags": nestedArrays(10000)}, nil, nil), 400, ""),
		// An unknown key is skipped whatever it holds (encoding rule 3),
		// so this hello is accepted: what matters is that skipping
		// 10,000 levels neither exhausts the stack nor takes long.
		helloAt("unknown key holding 10,000 nested arrays", helloBody("catalogue-deep", map[string][]byte{"extra": nestedArrays(10000)}, nil, nil), 200, ""),
		helloAt("capabilities.runners of 10,000 nested maps", helloBody("catalogue-case", nil, map[string][]byte{"runners": nestedMaps(10000)}, nil), 400, ""),

		// Wrong types for each required field of a hello.
		helloAt("machine_id an int", helloBody("", map[string][]byte{"machine_id": msgp.AppendInt(nil, 7)}, nil, nil), 400, ""),
		helloAt("label an array", helloBody("catalogue-case", map[string][]byte{"label": arrayOf(str("x"))}, nil, nil), 400, ""),
		helloAt("tags a str", helloBody("catalogue-case", map[string][]byte{"tags": str("a=b")}, nil, nil), 400, ""),
		helloAt("tags holding an int", helloBody("catalogue-case", map[string][]byte{"tags": arrayOf(msgp.AppendInt(nil, 1))}, nil, nil), 400, ""),
		helloAt("capabilities a str", helloBody("catalogue-case", map[string][]byte{"capabilities": str("process")}, nil, nil), 400, ""),
		helloAt("capabilities.runners a map", helloBody("catalogue-case", nil, map[string][]byte{"runners": mapOf(kv{"process", str("")})}, nil), 400, ""),
		helloAt("capabilities.max_invocations a str", helloBody("catalogue-case", nil, map[string][]byte{"max_invocations": str("4")}, nil), 400, ""),
		helloAt("versions an int", helloBody("catalogue-case", map[string][]byte{"versions": msgp.AppendInt(nil, 1)}, nil, nil), 400, ""),
		helloAt("versions.daemon an int", helloBody("catalogue-case", nil, nil, map[string][]byte{"daemon": msgp.AppendInt(nil, 1)}), 400, ""),
		helloAt("versions.protocol an array", helloBody("catalogue-case", nil, nil, map[string][]byte{"protocol": arrayOf(str("1"))}), 400, ""),
		helloAt("versions.cpu.cores a str", helloBody("catalogue-case", nil, nil, map[string][]byte{"cpu": mapOf(kv{"model", str("x")}, kv{"cores", str("many")})}), 400, ""),
		helloAt("hello missing capabilities", helloBody("catalogue-case", map[string][]byte{"capabilities": nil}, nil, nil), 422, "capabilities"),

		// NaN and infinities. An int refuses them (rule 7 of the
		// encoding rules); a poll's timeout_s is a float, and serve parks
		// a NaN or +Inf poll at most 20 s and answers -Inf at once.
		helloAt("capabilities.max_invocations NaN", helloBody("catalogue-case", nil, map[string][]byte{"max_invocations": msgp.AppendFloat64(nil, math.NaN())}, nil), 400, ""),
		helloAt("capabilities.max_invocations +Inf", helloBody("catalogue-case", nil, map[string][]byte{"max_invocations": msgp.AppendFloat64(nil, math.Inf(1))}, nil), 400, ""),
		{name: "exec result duration_ms NaN", path: "/v1/daemon/exec/catalogue-exec/result", body: execResultBody(msgp.AppendFloat64(nil, math.NaN())), want: 400, within: promptly},
		{name: "exec result duration_ms +Inf", path: "/v1/daemon/exec/catalogue-exec/result", body: execResultBody(msgp.AppendFloat64(nil, math.Inf(1))), want: 400, within: promptly},
		{name: "exec result duration_ms -Inf", path: "/v1/daemon/exec/catalogue-exec/result", body: execResultBody(msgp.AppendFloat32(nil, float32(math.Inf(-1)))), want: 400, within: promptly},
		{name: "poll timeout_s NaN", path: wire.PathPoll, body: pollBody(pollWorker, math.NaN()), want: 200, within: 20*time.Second + promptly},
		{name: "poll timeout_s +Inf", path: wire.PathPoll, body: pollBody(pollWorker, math.Inf(1)), want: 200, within: 20*time.Second + promptly},
		{name: "poll timeout_s -Inf", path: wire.PathPoll, body: pollBody(pollWorker, math.Inf(-1)), want: 200, within: promptly},

		// Invalid UTF-8, control characters and terminal escapes, in the
		// strings that reach an operator's terminal.
		helloAt("label invalid UTF-8", helloBody("catalogue-case", map[string][]byte{"label": str("box\xff\xfe")}, nil, nil), 422, wire.InvalidUTF8),
		helloAt("tag invalid UTF-8", helloBody("catalogue-case", map[string][]byte{"tags": arrayOf(str("zone=\xc3\x28"))}, nil, nil), 422, wire.InvalidUTF8),
		helloAt("label a terminal escape", helloBody("catalogue-case", map[string][]byte{"label": str("\x1b]0;pwned\x07\x1b[2J")}, nil, nil), 422, wire.InvalidControlChar),
		helloAt("label a NUL", helloBody("catalogue-case", map[string][]byte{"label": str("box\x00")}, nil, nil), 422, wire.InvalidControlChar),
		helloAt("label a C1 CSI", helloBody("catalogue-case", map[string][]byte{"label": str("box\u009b31m")}, nil, nil), 422, wire.InvalidControlChar),
		helloAt("tag a newline", helloBody("catalogue-case", map[string][]byte{"tags": arrayOf(str("a=b\nFAKE LOG LINE"))}, nil, nil), 422, wire.InvalidControlChar),
		helloAt("machine_id a terminal escape", helloBody("catalogue-\x1b[2J", nil, nil, nil), 422, wire.InvalidCharacter),
		helloAt("versions.daemon a bell", helloBody("catalogue-case", nil, nil, map[string][]byte{"daemon": str("0.3\x07")}), 422, wire.InvalidControlChar),
		// Probe output is taken on one line (runsc --version prints two):
		// each run of control characters becomes a space.
		helloAt("versions.distro a bell", helloBody("catalogue-case", nil, nil, map[string][]byte{"distro": str("Linux\x07")}), 200, "worker_id"),

		// Slow bodies: one that stalls after ten bytes meets the idle
		// bound; one trickled a byte a second meets the whole-body bound
		// (60 s plus 1 s per 128 KiB announced).
		{name: "body stalled after 10 of 100 bytes", path: wire.PathHello, want: 408, wantBody: "no byte",
			within: wire.BodyIdleTimeout + 5*time.Second,
			send: func(w io.Writer) error {
				if _, err := io.WriteString(w, "Content-Length: 100\r\n\r\n"+strings.Repeat("a", 10)); err != nil {
					return err
				}
				time.Sleep(wire.BodyIdleTimeout + 10*time.Second)
				return nil
			}},
		{name: "body trickled a byte a second", path: wire.PathHello, want: 408, wantBody: "did not arrive in whole",
			within: wire.BodyDeadline(wire.BodyTimeout, 100) + 5*time.Second,
			send: func(w io.Writer) error {
				if _, err := io.WriteString(w, "Content-Length: 100\r\n\r\n"); err != nil {
					return err
				}
				for range 100 {
					if _, err := w.Write([]byte{0x90}); err != nil {
						return err
					}
					time.Sleep(time.Second)
				}
				return nil
			}},
	}
	return cases
}

// catalogueHost is a nymph serve with a daemon registered to it.
type catalogueHost struct {
	dir          string
	addr         string
	caFile       string       // serve's DATA-DIR/tls/ca.crt
	tls          *tls.Config  // verifies serve by it, for connections written by hand
	httpc        *http.Client // and for requests net/http writes
	daemonToken  string
	adminTokenFn string
	servePid     int
	serveExited  <-chan struct{}
}

func startCatalogueHost(t *testing.T) *catalogueHost {
	t.Helper()
	dir := t.TempDir()
	h := &catalogueHost{dir: dir, daemonToken: "catalogue-daemon-secret", adminTokenFn: filepath.Join(dir, "admin.token")}
	writeFile(t, filepath.Join(dir, "daemon.token"), h.daemonToken+"\n", 0o600)
	writeFile(t, h.adminTokenFn, "catalogue-admin-secret\n", 0o600)
	writeFile(t, filepath.Join(dir, "daemon.toml"), `[daemon]
machine_id = "m1"
label = "catalogue box"

[runtime]
keep_alive_s = -1
max_invocations = 4

[poll]
retry_min_s = 0.1
retry_max_s = 0.5
`, 0o600)
	h.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freeLoopbackPort(t)))

	h.caFile = filepath.Join(dir, "data", "tls", tlsca.CAFile)

	h.servePid, h.serveExited = h.start(t, "serve.log", "serve", "--listen", h.addr, "--data-dir", filepath.Join(dir, "data"),
		"--token-file", filepath.Join(dir, "daemon.token"), "--admin-token-file", h.adminTokenFn)
	waitHealthy(t, "https://"+h.addr+"/healthz", h.caFile)
	cfg, err := tlsca.ClientConfig(h.caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	h.tls = cfg
	h.httpc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}

	h.start(t, "daemon.log", "daemon", "--config", filepath.Join(dir, "daemon.toml"), "--server", "https://"+h.addr,
		"--ca-file", h.caFile, "--token-file", filepath.Join(dir, "daemon.token"), "--workdir", filepath.Join(dir, "work"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := h.ctl(ctx, "wait", "m1", "--state", "active").CombinedOutput(); err != nil {
		t.Fatalf("ctl wait m1: %v\n%s\ndaemon log:\n%s", err, out, readLog(dir, "daemon.log"))
	}
	return h
}

// start runs the nymph binary with args, its output to a log in h.dir,
// and stops it (SIGTERM, then SIGKILL) when the test ends.
func (h *catalogueHost) start(t *testing.T, logName string, args ...string) (pid int, exited <-chan struct{}) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(h.dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "nymph"), args...)
	cmd.Env = append(os.Environ(), "NYMPH_CLOUD_METADATA=off")
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
	return cmd.Process.Pid, done
}

func (h *catalogueHost) ctl(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "nymph"), append([]string{"ctl"}, args...)...)
	cmd.Env = append(os.Environ(), "NYMPH_SERVER=https://"+h.addr, "NYMPH_CA_FILE="+h.caFile, "NYMPH_ADMIN_TOKEN_FILE="+h.adminTokenFn)
	return cmd
}

// checkAlive fails the test when serve has exited or no longer answers
// its health check.
func (h *catalogueHost) checkAlive(t *testing.T) {
	t.Helper()
	select {
	case <-h.serveExited:
		t.Fatalf("serve exited; its log:\n%s", readLog(h.dir, "serve.log"))
	default:
	}
	resp, err := h.httpc.Get("https://" + h.addr + "/healthz")
	if err != nil {
		t.Fatalf("serve's health check: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("serve's health check answered %d", resp.StatusCode)
	}
}

// exchangeResult is what serve answered to one request.
type exchangeResult struct {
	status  int
	body    []byte
	elapsed time.Duration
	err     error
}

// roundTrip sends c over a TLS connection of its own (HTTP/1.1), written
// by hand so that its headers, framing and pace are exactly the
// catalogue's, and reads the answer while the request is still being
// written (serve may answer a body it refuses before the client is done
// sending it).
func (h *catalogueHost) roundTrip(c badRequest) exchangeResult {
	start := time.Now()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", h.addr, h.tls)
	if err != nil {
		return exchangeResult{err: err}
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(start.Add(c.within + 10*time.Second))
	go func() {
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-msgpack\r\nAccept: application/x-msgpack\r\nAuthorization: Bearer %s\r\n",
			c.path, h.addr, h.daemonToken)
		if _, err := io.WriteString(conn, head); err != nil {
			return
		}
		if c.send != nil {
			_ = c.send(conn)
			return
		}
		_, _ = fmt.Fprintf(conn, "Content-Length: %d\r\n\r\n", len(c.body))
		_, _ = conn.Write(c.body)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return exchangeResult{elapsed: time.Since(start), err: err}
	}
	defer resp.Body.Close()
	elapsed := time.Since(start)
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if strings.Contains(resp.Header.Get("Content-Type"), "msgpack") {
		var v any
		if msgpack.Unmarshal(body, &v) == nil {
			body = []byte(fmt.Sprint(v))
		}
	}
	return exchangeResult{status: resp.StatusCode, body: body, elapsed: elapsed}
}

// idleConnections opens n connections that never send a request — half
// never send a byte (no TLS handshake), half finish the handshake and
// send nothing more — checks that serve still answers while they are
// open, and that it closes each of them once the header timeout (which
// also bounds the handshake) has passed.
func (h *catalogueHost) idleConnections(t *testing.T, n int) {
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for i := range n {
		var c net.Conn
		var err error
		if i%2 == 0 {
			c, err = net.DialTimeout("tcp", h.addr, 5*time.Second)
		} else {
			c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", h.addr, h.tls)
		}
		if err != nil {
			t.Fatalf("connection %d of %d: %v", len(conns)+1, n, err)
		}
		conns = append(conns, c)
	}
	h.checkAlive(t)
	h.hello(t, "catalogue-beside-idle")

	bound := wire.HeaderTimeout + 5*time.Second
	var wg sync.WaitGroup
	var stillOpen atomic.Int32
	var lastClose atomic.Int64
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(start.Add(bound))
			_, err := c.Read(make([]byte, 1))
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				stillOpen.Add(1)
				return
			}
			for {
				prev, now := lastClose.Load(), int64(time.Since(start))
				if now <= prev || lastClose.CompareAndSwap(prev, now) {
					break
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d idle connections: serve closed %d, the last after %s", n, n-int(stillOpen.Load()), time.Duration(lastClose.Load()).Round(time.Millisecond))
	if k := stillOpen.Load(); k > 0 {
		t.Errorf("%d of %d idle connections were still open after %s", k, n, bound)
	}
}

// hello registers machineID and returns its worker id.
func (h *catalogueHost) hello(t *testing.T, machineID string) string {
	t.Helper()
	status, answer, err := h.post(wire.PathHello, helloBody(machineID, nil, nil, nil))
	if err != nil || status != http.StatusOK {
		t.Fatalf("hello %s: status %d, %v: %s", machineID, status, err, truncateForLog(answer))
	}
	var resp struct {
		WorkerID string `msgpack:"worker_id"`
	}
	if err := msgpack.Unmarshal(answer, &resp); err != nil || resp.WorkerID == "" {
		t.Fatalf("hello %s: answer %s: %v", machineID, truncateForLog(answer), err)
	}
	return resp.WorkerID
}

func (h *catalogueHost) post(path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, "https://"+h.addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/x-msgpack")
	req.Header.Set("Accept", "application/x-msgpack")
	req.Header.Set("Authorization", "Bearer "+h.daemonToken)
	resp, err := h.httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}

// startHelloPollLoop runs a plain client that says hello and polls
// (answered at once) in a loop, as a daemon would, until the returned
// function stops it and reports its rounds and failures.
func (h *catalogueHost) startHelloPollLoop(t *testing.T) func() (int, []string) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	var rounds int
	var failures []string
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			status, answer, err := h.post(wire.PathHello, helloBody("catalogue-loop", nil, nil, nil))
			if err != nil || status != http.StatusOK {
				failures = append(failures, fmt.Sprintf("hello: status %d, %v: %s", status, err, truncateForLog(answer)))
				continue
			}
			var resp struct {
				WorkerID string `msgpack:"worker_id"`
			}
			if err := msgpack.Unmarshal(answer, &resp); err != nil {
				failures = append(failures, fmt.Sprintf("hello answer: %v", err))
				continue
			}
			status, answer, err = h.post(wire.PathPoll, pollBody(resp.WorkerID, 0))
			if err != nil || status != http.StatusOK {
				failures = append(failures, fmt.Sprintf("poll: status %d, %v: %s", status, err, truncateForLog(answer)))
				continue
			}
			rounds++
		}
	}()
	return func() (int, []string) {
		close(stop)
		<-done
		return rounds, failures
	}
}

// processMemory is a process's resident set, now and at its peak.
type processMemory struct{ rssKiB, hwmKiB int64 }

func readMemory(t *testing.T, pid int) processMemory {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("serve's memory: %v", err)
	}
	var m processMemory
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch name {
		case "VmRSS":
			m.rssKiB = n
		case "VmHWM":
			m.hwmKiB = n
		}
	}
	if m.rssKiB == 0 || m.hwmKiB == 0 {
		t.Fatalf("no VmRSS or VmHWM in /proc/%d/status", pid)
	}
	return m
}

// Building msgpack by hand: the catalogue needs bodies no encoder would
// write (truncated, lying about lengths, mistyped).

type kv struct {
	key string
	val []byte
}

func str(s string) []byte { return msgp.AppendString(nil, s) }

func mapOf(fields ...kv) []byte {
	b := msgp.AppendMapHeader(nil, uint32(len(fields)))
	for _, f := range fields {
		b = msgp.AppendString(b, f.key)
		b = append(b, f.val...)
	}
	return b
}

func arrayOf(items ...[]byte) []byte {
	b := msgp.AppendArrayHeader(nil, uint32(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

// truncatedAt is a hello map announcing seven entries that ends after
// fields: the last of them is a header announcing more than follows.
func truncatedAt(fields ...kv) []byte {
	b := msgp.AppendMapHeader(nil, 7)
	for _, f := range fields {
		b = msgp.AppendString(b, f.key)
		b = append(b, f.val...)
	}
	return b
}

// helloHead is the required fields of a hello that come before
// capabilities and versions, then rest.
func helloHead(rest ...kv) []kv {
	return append([]kv{{"machine_id", str("catalogue-case")}, {"label", str("")}, {"tags", arrayOf()}}, rest...)
}

func hugeMap() []byte   { return []byte{0xdf, 0xff, 0xff, 0xff, 0xff} }
func hugeArray() []byte { return []byte{0xdd, 0xff, 0xff, 0xff, 0xff} }
func hugeStr() []byte   { return []byte{0xdb, 0xff, 0xff, 0xff, 0xff} }

func nestedArrays(depth int) []byte {
	b := bytes.Repeat([]byte{0x91}, depth)
	return append(b, 0xc0)
}

func nestedMaps(depth int) []byte {
	var b []byte
	for range depth {
		b = msgp.AppendMapHeader(b, 1)
		b = msgp.AppendString(b, "k")
	}
	return append(b, 0xc0)
}

func capabilities(replace map[string][]byte) []byte {
	return mapOf(replaced([]kv{
		{"runners", arrayOf(str("process"))},
		{"max_invocations", msgp.AppendInt(nil, 0)},
		{"workdir", str("/tmp/catalogue")},
	}, replace)...)
}

func versions(replace map[string][]byte) []byte {
	return mapOf(replaced([]kv{
		{"daemon", str("catalogue")},
		{"protocol", str("1")},
	}, replace)...)
}

// helloBody is a valid hello for machineID with some fields replaced:
// top, in the hello itself, caps in capabilities, vers in versions. A
// key replaced by nil is left out; a key not present is added.
func helloBody(machineID string, top, caps, vers map[string][]byte) []byte {
	return mapOf(replaced([]kv{
		{"machine_id", str(machineID)},
		{"label", str("catalogue")},
		{"tags", arrayOf(str("role=catalogue"))},
		{"capabilities", capabilities(caps)},
		{"versions", versions(vers)},
	}, top)...)
}

func replaced(fields []kv, replace map[string][]byte) []kv {
	out := make([]kv, 0, len(fields)+len(replace))
	seen := map[string]bool{}
	for _, f := range fields {
		seen[f.key] = true
		if v, ok := replace[f.key]; ok {
			if v == nil {
				continue
			}
			f.val = v
		}
		out = append(out, f)
	}
	for k, v := range replace {
		if !seen[k] && v != nil {
			out = append(out, kv{k, v})
		}
	}
	return out
}

func pollBody(workerID string, timeoutS float64) []byte {
	return mapOf(
		kv{"worker_id", str(workerID)},
		kv{"queue", str("catalogue")},
		kv{"timeout_s", msgp.AppendFloat64(nil, timeoutS)},
		kv{"cursor", msgp.AppendNil(nil)},
		kv{"invocations", arrayOf()},
	)
}

func execResultBody(durationMS []byte) []byte {
	return mapOf(
		kv{"exit_code", msgp.AppendInt(nil, 0)},
		kv{"stdout", str("")},
		kv{"stderr", str("")},
		kv{"duration_ms", durationMS},
		kv{"result_inline", msgp.AppendNil(nil)},
		kv{"result_ref", msgp.AppendNil(nil)},
	)
}

// headersOnly announces a body of n bytes and sends none of it: serve
// must refuse on the announcement alone.
// withHeaders sends the extra header lines and a Content-Length of n,
// and no body.
func withHeaders(n int, lines ...string) func(io.Writer) error {
	return func(w io.Writer) error {
		for _, l := range lines {
			if _, err := io.WriteString(w, l+"\r\n"); err != nil {
				return err
			}
		}
		return headersOnly(n)(w)
	}
}

// signedHeaders are the five signature headers, well formed but for the
// timestamp given, signed by no key.
func signedHeaders(timestamp string) []string {
	return []string{"X-LS-Key-Id: ed25519-" + strings.Repeat("0", 32), "X-LS-Timestamp: " + timestamp,
		"X-LS-Nonce: " + strings.Repeat("n", 22), "X-LS-Audience: https://plane.example",
		"X-LS-Signature: " + strings.Repeat("A", 86)}
}

func headersOnly(n int) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "Content-Length: %d\r\n\r\n", n)
		return err
	}
}

// chunked sends n bytes of nil (0xc0) as a chunked body, in 64 KiB chunks.
func chunked(n int) func(io.Writer) error {
	return chunkedBody(bytes.Repeat([]byte{0xc0}, (n+64<<10-1)/(64<<10)*(64<<10)))
}

// chunkedBody sends body as a chunked body, in 64 KiB chunks.
func chunkedBody(body []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, "Transfer-Encoding: chunked\r\n\r\n"); err != nil {
			return err
		}
		for rest := body; len(rest) > 0; {
			chunk := rest[:min(len(rest), 64<<10)]
			rest = rest[len(chunk):]
			if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, "0\r\n\r\n")
		return err
	}
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// waitHealthy waits until url answers 200, verified by the CA in caFile
// (which serve writes before it listens).
func waitHealthy(t *testing.T, url, caFile string) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for time.Now().Before(deadline) {
		if cfg, err := tlsca.ClientConfig(caFile); err == nil {
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
			if resp, err := hc.Get(url); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within %s", url, waitDeadline)
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func readLog(dir, name string) string {
	data, _ := os.ReadFile(filepath.Join(dir, name))
	return string(data)
}

func truncateForLog(b []byte) string {
	const shown = 300
	if len(b) > shown {
		return strconv.Quote(string(b[:shown])) + "…"
	}
	return strconv.Quote(string(b))
}
