//go:build unix

package relay

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// procStatus reads a "VmRSS"-style field of /proc/self/status in bytes.
func procStatus(tb testing.TB, field string) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status:", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024
		}
	}
	tb.Fatalf("no %s in /proc/self/status", field)
	return 0
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdlePairs10k starts a relay on 10,000 machine directories with
// one FIFO pair each and reports the time to have every pair pumped, the
// RSS it added, and the CPU it burns idle over two seconds.
//
//	go test -run '^$' -bench IdlePairs10k -benchtime 1x ./relay/
func BenchmarkIdlePairs10k(b *testing.B) {
	const pairs = 10000
	fp := newFakePlane(b)
	prefix := b.TempDir()
	for i := range pairs {
		makePair(b, filepath.Join(prefix, fmt.Sprintf("m%05d", i)), "")
	}
	for range b.N {
		runtime.GC()
		rssBefore := procStatus(b, "VmRSS")
		start := time.Now()
		rl, cancel, done := startRelay(b, prefix, fp.URL, func(c *Config) { c.SpoolInterval = DefaultSpoolInterval })
		ready := time.Since(start)
		if got := rl.metrics.pumps.Load(); got != pairs {
			b.Fatalf("pumps = %d, want %d", got, pairs)
		}
		cpu0, t0 := cpuTime(), time.Now()
		time.Sleep(2 * time.Second) // idle on purpose: this is what is measured
		idleCPU := float64(cpuTime()-cpu0) / float64(time.Since(t0))
		rss := procStatus(b, "VmRSS") - rssBefore
		b.ReportMetric(ready.Seconds(), "discovery-s")
		b.ReportMetric(rss/(1<<20), "rss-added-MiB")
		b.ReportMetric(idleCPU*100, "idle-cpu-%")
		b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
		cancel()
		<-done
	}
}

// benchPlane is a local upstream answering small requests at once.
func benchPlane(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(answerAtOnce))
	b.Cleanup(srv.Close)
	return srv
}

func answerAtOnce(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Write([]byte("ok"))
}

// benchUpstreamEnv makes the test binary serve as an upstream instead of
// running tests: benchPlaneProcess starts it so. Its value names the
// server: "minimal" for minimalServer, anything else for net/http's with
// answerAtOnce.
const benchUpstreamEnv = "NYMPH_RELAY_BENCH_UPSTREAM"

// roles are the processes this test binary also runs: a role runs instead
// of the tests when its environment variable is set, and is given its value.
var roles = []struct {
	env string
	run func(string)
}{
	{benchUpstreamEnv, serveBenchUpstream},
	{seedDaemonEnv, seedDaemon},
	{relayProcessEnv, relayProcess},
	{latencyClientEnv, latencyClient},
	{fifoEchoEnv, fifoEcho},
}

func TestMain(m *testing.M) {
	for _, r := range roles {
		if v := os.Getenv(r.env); v != "" {
			r.run(v)
			return
		}
	}
	os.Exit(m.Run())
}

// serveBenchUpstream listens on a loopback port, prints its URL and serves
// until its stdin closes (the benchmark ended or died).
func serveBenchUpstream(kind string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if kind == "minimal" {
		new(minimalServer).serve(ln)
		return
	}
	http.Serve(ln, http.HandlerFunc(answerAtOnce))
}

// benchPlaneProcess is benchPlane, or minimalPlane when kind is
// "minimal", in a process of its own (this test binary, re-run), and
// returns its URL.
func benchPlaneProcess(b *testing.B, kind string) string {
	_, _, out := startRole(b, benchUpstreamEnv+"="+kind)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("bench upstream: %v", err)
	}
	return strings.TrimSpace(line)
}

// pipeClient is a daemon keeping its pair open between requests.
type pipeClient struct {
	resp, req *os.File
	frame     []byte
	buf       []byte
	want      []byte // the first reply, once it was checked to be a 200
	echoed    bool   // the reply is the request frame itself (no relay)
}

func newPipeClient(b *testing.B, dir string) *pipeClient {
	resp, req := daemonSide{dir: dir}.open(b)
	b.Cleanup(func() { resp.Close(); req.Close() })
	return &pipeClient{resp: resp, req: req, buf: make([]byte, 512),
		frame: frame.Append(nil, envelope(b, "/v1/daemon/ack", "bench-1", bytes.Repeat([]byte("a"), 100)))}
}

// roundTrip writes the frame and reads its reply as a daemon does: into a
// buffer, as many bytes as the pipe has, until the whole frame is there.
func (c *pipeClient) roundTrip() error {
	if _, err := c.req.Write(c.frame); err != nil {
		return err
	}
	have, want := 0, 4
	for have < want {
		n, err := c.resp.Read(c.buf[have:])
		if err != nil {
			return err
		}
		have += n
		if want == 4 && have >= 4 {
			want += int(c.buf[0])<<24 | int(c.buf[1])<<16 | int(c.buf[2])<<8 | int(c.buf[3])
			if want > len(c.buf) {
				return fmt.Errorf("reply of %d bytes", want)
			}
		}
	}
	return c.check(c.buf[4:have])
}

// check holds a reply to what the upstream answers, so a relay_error is
// never counted as a frame carried. The first reply is decoded and must be
// a 200; every later one must be the same bytes (the request never
// changes, nor does its id).
func (c *pipeClient) check(reply []byte) error {
	if c.echoed {
		if !bytes.Equal(reply, c.frame[4:]) {
			return fmt.Errorf("echo %q, want the request", reply)
		}
		return nil
	}
	if c.want != nil {
		if !bytes.Equal(reply, c.want) {
			return fmt.Errorf("reply %q, want %q", reply, c.want)
		}
		return nil
	}
	var r wire.RelayReply
	if _, err := r.UnmarshalMsg(reply); err != nil {
		return fmt.Errorf("reply %q: %w", reply, err)
	}
	if r.Status != 200 || r.RelayError != nil {
		return fmt.Errorf("reply: status %d, relay_error %v, body %q", r.Status, r.RelayError, r.Body)
	}
	c.want = bytes.Clone(reply)
	return nil
}

// BenchmarkThroughput sends small frames across 1, 100 and 1,000 pairs,
// through the relay with its default transport (inlinehttp for this
// cleartext upstream) and with net/http's, and the same requests straight
// to the same upstream, in one run. The upstream is minimalPlane in this
// process, so what is measured is the relay, not the upstream (see
// minimalServer); the variants below put net/http's server there instead,
// and the upstream in a process of its own.
//
//	go test -run '^$' -bench '^BenchmarkThroughput$' -benchtime 20000x ./relay/
func BenchmarkThroughput(b *testing.B) { benchThroughput(b, minimalUpstream) }

// BenchmarkThroughputNetHTTPPlane is BenchmarkThroughput against net/http's
// server (answerAtOnce) in this process, as nymph serve answers.
//
//	go test -run '^$' -bench ThroughputNetHTTPPlane -benchtime 20000x ./relay/
func BenchmarkThroughputNetHTTPPlane(b *testing.B) { benchThroughput(b, netHTTPUpstream) }

// BenchmarkThroughputTLS is BenchmarkThroughput over HTTPS with HTTP/2, the
// production setting: the relay's pumps share a few multiplexed
// connections (a transport per 100 requests in flight, as the relay's
// default does, and one transport for comparison), while each direct
// daemon has a connection of its own.
//
//	go test -run '^$' -bench ThroughputTLS -benchtime 20000x ./relay/
func BenchmarkThroughputTLS(b *testing.B) { benchThroughput(b, tlsUpstream) }

// BenchmarkThroughputSeparateUpstream is BenchmarkThroughputNetHTTPPlane
// with the upstream in a process of its own, as a real control plane is:
// every hop to it is then a wake-up of another process, not a goroutine of
// the same scheduler.
//
//	go test -run '^$' -bench '^BenchmarkThroughputSeparateUpstream$' -benchtime 20000x ./relay/
func BenchmarkThroughputSeparateUpstream(b *testing.B) { benchThroughput(b, separateUpstream) }

// BenchmarkThroughputSeparateMinimalUpstream is BenchmarkThroughput with
// minimalPlane in a process of its own.
//
//	go test -run '^$' -bench ThroughputSeparateMinimalUpstream -benchtime 20000x ./relay/
func BenchmarkThroughputSeparateMinimalUpstream(b *testing.B) {
	benchThroughput(b, separateMinimalUpstream)
}

// An upstreamKind starts a local upstream and names the clients to reach
// it: the relay's, by variant name (nil: the relay's default), and a
// direct daemon's.
type upstreamKind func(b *testing.B) (url string, relay map[string]*http.Client, direct func() *http.Client)

func minimalUpstream(b *testing.B) (string, map[string]*http.Client, func() *http.Client) {
	return cleartextUpstream(minimalPlane(b))
}

func netHTTPUpstream(b *testing.B) (string, map[string]*http.Client, func() *http.Client) {
	return cleartextUpstream(benchPlane(b).URL)
}

func separateUpstream(b *testing.B) (string, map[string]*http.Client, func() *http.Client) {
	return cleartextUpstream(benchPlaneProcess(b, "nethttp"))
}

func separateMinimalUpstream(b *testing.B) (string, map[string]*http.Client, func() *http.Client) {
	return cleartextUpstream(benchPlaneProcess(b, "minimal"))
}

// cleartextUpstream names the clients for an http:// upstream at url: the
// relay's default (inlinehttp) and net/http's, for comparison.
func cleartextUpstream(url string) (string, map[string]*http.Client, func() *http.Client) {
	return url, map[string]*http.Client{"relay": nil, "relay-nethttp": NewClient(0)},
		func() *http.Client { return NewClient(0) }
}

// tlsPlane is benchPlane over HTTPS with HTTP/2; transport makes a relay
// transport that trusts its certificate.
func tlsPlane(tb testing.TB) (url string, transport func() *http.Transport) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(answerAtOnce))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return srv.URL, func() *http.Transport {
		t := newTransport(0)
		t.TLSClientConfig.RootCAs = roots
		return t
	}
}

func tlsUpstream(b *testing.B) (string, map[string]*http.Client, func() *http.Client) {
	url, transport := tlsPlane(b)
	client := func() *http.Client { return &http.Client{Transport: transport()} }
	// "relay" is the relay's default for https, but trusting the test's
	// certificate; "relay-1transport" is one transport for every pump.
	return url, map[string]*http.Client{
		"relay":            {Transport: newTransportPool(0, func(int) *http.Transport { return transport() })},
		"relay-1transport": client(),
	}, client
}

func benchThroughput(b *testing.B, kind upstreamKind) {
	for _, pairs := range []int{1, 100, 1000} {
		for _, variant := range []string{"relay", "relay-nethttp", "relay-1transport"} {
			b.Run(fmt.Sprintf("pairs=%d/%s", pairs, variant), func(b *testing.B) {
				url, relayClients, _ := kind(b)
				client, ok := relayClients[variant]
				if !ok {
					b.Skip("no such variant for this upstream")
				}
				prefix := b.TempDir()
				for i := range pairs {
					makePair(b, filepath.Join(prefix, fmt.Sprintf("m%04d", i)), "")
				}
				startRelay(b, prefix, url, func(c *Config) { c.Client = client })
				clients := make([]*pipeClient, pairs)
				for i := range clients {
					clients[i] = newPipeClient(b, filepath.Join(prefix, fmt.Sprintf("m%04d", i)))
				}
				runSpread(b, pairs, func(i int) error { return clients[i].roundTrip() })
			})
		}
		b.Run(fmt.Sprintf("pairs=%d/direct", pairs), func(b *testing.B) {
			url, _, client := kind(b)
			// One client per daemon: separate daemons share no connection.
			clients := make([]*http.Client, pairs)
			for i := range clients {
				clients[i] = client()
			}
			body := envelope(b, "/v1/daemon/ack", "bench-1", bytes.Repeat([]byte("a"), 100))
			runSpread(b, pairs, func(i int) error { return postDirect(clients[i], url+"/v1/daemon/ack", body) })
		})
	}
}

// postDirect sends body as a daemon without a relay does; like
// pipeClient.check, it counts only a 200.
func postDirect(c *http.Client, url string, body []byte) error {
	resp, err := c.Post(url, defaultContentType, bytes.NewReader(body))
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

// runSpread runs b.N calls over workers goroutines and reports frames/s.
func runSpread(b *testing.B, workers int, call func(worker int) error) {
	b.ReportAllocs()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	per, extra := b.N/workers, b.N%workers
	// One untimed call per worker first, so connections (and TLS
	// handshakes) are made before the clock starts: the figure is the
	// steady state.
	for w := range workers {
		if err := call(w); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		n := per
		if w < extra {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := call(w); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "frames/s")
}

// BenchmarkLatencyRatio alternates one request through the relay and the
// same request sent directly, and reports the ratio of their mean times.
// The upstream is minimalPlane, as in BenchmarkThroughput.
//
//	go test -run '^$' -bench LatencyRatio -benchtime 5000x ./relay/
func BenchmarkLatencyRatio(b *testing.B) { latencyRatio(b, minimalPlane(b)) }

// BenchmarkLatencyRatioNetHTTPPlane is BenchmarkLatencyRatio against
// net/http's server in this process.
//
//	go test -run '^$' -bench LatencyRatioNetHTTPPlane -benchtime 5000x ./relay/
func BenchmarkLatencyRatioNetHTTPPlane(b *testing.B) { latencyRatio(b, benchPlane(b).URL) }

// BenchmarkLatencyRatioSeparateUpstream is BenchmarkLatencyRatioNetHTTPPlane
// with the upstream in a process of its own.
//
//	go test -run '^$' -bench LatencyRatioSeparateUpstream -benchtime 5000x ./relay/
func BenchmarkLatencyRatioSeparateUpstream(b *testing.B) {
	latencyRatio(b, benchPlaneProcess(b, "nethttp"))
}

func latencyRatio(b *testing.B, url string) {
	prefix := b.TempDir()
	makePair(b, filepath.Join(prefix, "m"), "")
	startRelay(b, prefix, url, nil)
	pc := newPipeClient(b, filepath.Join(prefix, "m"))
	client := NewClient(0)
	body := envelope(b, "/v1/daemon/ack", "bench-1", bytes.Repeat([]byte("a"), 100))
	var viaRelay, direct time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := pc.roundTrip(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := postDirect(client, url+"/v1/daemon/ack", body); err != nil {
			b.Fatal(err)
		}
		viaRelay += t1.Sub(t0)
		direct += time.Since(t1)
	}
	b.ReportMetric(float64(viaRelay.Microseconds())/float64(b.N), "relay-µs/op")
	b.ReportMetric(float64(direct.Microseconds())/float64(b.N), "direct-µs/op")
	b.ReportMetric(float64(viaRelay)/float64(direct), "ratio")
}

// BenchmarkFrame256MiB sends one frame of 256 MiB and reports how much the
// process's peak RSS grew while the relay streamed it upstream.
//
//	go test -run '^$' -bench Frame256MiB -benchtime 1x ./relay/
func BenchmarkFrame256MiB(b *testing.B) {
	srv := benchPlane(b)
	prefix := b.TempDir()
	makePair(b, filepath.Join(prefix, "m"), "")
	startRelay(b, prefix, srv.URL, nil)
	const size = frame.MaxPayload
	head := envPrefix("huge")
	head = append(head, 0xc6, 0, 0, 0, 0)
	bodyLen := size - len(head)
	head[len(head)-4], head[len(head)-3], head[len(head)-2], head[len(head)-1] = byte(bodyLen>>24), byte(bodyLen>>16), byte(bodyLen>>8), byte(bodyLen)
	chunk := make([]byte, 1<<20)
	for range b.N {
		resp, req := daemonSide{dir: filepath.Join(prefix, "m")}.open(b)
		before := resetPeakRSS(b)
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		start := time.Now()
		go func() {
			req.Write(frame.AppendHeader(nil, size))
			req.Write(head)
			for left := bodyLen; left > 0; left -= len(chunk) {
				if _, err := req.Write(chunk[:min(left, len(chunk))]); err != nil {
					return
				}
			}
		}()
		rep := decodeReply(b, readFrame(b, resp))
		if rep.Status != 200 {
			b.Fatalf("reply = %+v", rep)
		}
		b.ReportMetric(float64(size)/(1<<20)/time.Since(start).Seconds(), "MiB/s")
		b.ReportMetric((procStatus(b, "VmHWM")-before)/(1<<20), "peak-rss-growth-MiB")
		runtime.ReadMemStats(&ms1)
		b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/(1<<20), "go-alloc-MiB")
		resp.Close()
		req.Close()
	}
}

// BenchmarkRelayOwnCost sends small frames one at a time over one pair to
// an upstream answered in memory, so what is left is the relay's own cost
// per frame: two FIFO hops, the envelope, the checks and the reply. The
// floor of two FIFO hops between goroutines is about 5 µs on a 2-core VM.
//
//	go test -run '^$' -bench RelayOwnCost -benchtime 50000x ./relay/
func BenchmarkRelayOwnCost(b *testing.B) {
	prefix := b.TempDir()
	makePair(b, filepath.Join(prefix, "m"), "")
	startRelay(b, prefix, "http://127.0.0.1:1/", func(c *Config) { c.Client = &http.Client{Transport: memPlane{}} })
	pc := newPipeClient(b, filepath.Join(prefix, "m"))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := pc.roundTrip(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/1e3/float64(b.N), "µs/frame")
}

// BenchmarkReply256MiB has the upstream answer one request with a body
// that fills a frame (256 MiB, raw, with a Content-Length and chunked) and
// reports how much the process's peak RSS grew while the relay streamed it
// into the reply pipe, which the daemon side reads and drops.
//
//	go test -run '^$' -bench Reply256MiB -benchtime 1x ./relay/
func BenchmarkReply256MiB(b *testing.B) {
	for _, chunked := range []bool{false, true} {
		b.Run(fmt.Sprintf("chunked=%v", chunked), func(b *testing.B) {
			url := bigReplyPlane(b, frame.MaxPayload, chunked, 200)
			prefix := b.TempDir()
			makePair(b, filepath.Join(prefix, "m"), "")
			startRelay(b, prefix, url, nil)
			buf := make([]byte, 1<<20)
			for range b.N {
				resp, req := daemonSide{dir: filepath.Join(prefix, "m")}.open(b)
				before := resetPeakRSS(b)
				start := time.Now()
				writeAll(b, req, frame.Append(nil, envelope(b, "/v1/daemon/poll", "", nil)))
				resp.SetReadDeadline(time.Now().Add(time.Minute))
				var hdr [4]byte
				if _, err := io.ReadFull(resp, hdr[:]); err != nil {
					b.Fatal(err)
				}
				n := int64(binary.BigEndian.Uint32(hdr[:]))
				if n != frame.MaxPayload {
					b.Fatalf("reply of %d bytes, want %d", n, frame.MaxPayload)
				}
				if _, err := io.CopyBuffer(io.Discard, io.LimitReader(resp, n), buf); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/(1<<20)/time.Since(start).Seconds(), "MiB/s")
				b.ReportMetric((procStatus(b, "VmHWM")-before)/(1<<20), "peak-rss-growth-MiB")
				resp.Close()
				req.Close()
			}
		})
	}
}

// resetPeakRSS collects, resets the process's peak RSS and returns it
// (VmHWM, in bytes), the base a streaming benchmark's growth is read from.
func resetPeakRSS(b *testing.B) float64 {
	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skip("cannot reset the peak RSS:", err)
	}
	return procStatus(b, "VmHWM")
}
