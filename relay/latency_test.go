//go:build unix

package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/fifoclient"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/relay/internal/inlinehttp"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
	"golang.org/x/sys/unix"
)

// BenchmarkLatencyProcesses measures the time a closed-loop daemon waits
// for each small request (100-byte body) with every party in a process of
// its own, as in production: the daemon (a client process), the relay
// (a relay process) and the upstream (net/http's server, as nymph serve
// is, in a third process). Side by side, in one run, with the same client
// posting the same request straight to the upstream over a kept-alive
// connection (net/http's client, as the daemon's direct transport, and
// inlinehttp, the relay's own client, which costs no goroutine hand-off),
// the daemon's real FIFO transport (hostio/fifoclient, which opens both
// pipes per request) beside a daemon keeping its pair open, and with the
// floor under any FIFO relay: a FIFO round trip
// between two processes (the client's frame echoed back by a process that
// holds the pipes as the relay does). Relay and direct runs alternate in
// rounds so that a change in the host's load meets both.
//
//	go test -run '^$' -bench LatencyProcesses -benchtime 1x ./relay/
func BenchmarkLatencyProcesses(b *testing.B) {
	upstream := benchPlaneProcess(b, "nethttp")
	for _, pairs := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("pairs=%d", pairs), func(b *testing.B) {
			perPair := max(20000/pairs, 20)
			prefix := b.TempDir()
			for i := range pairs {
				makePair(b, filepath.Join(prefix, fmt.Sprintf("m%04d", i)), "")
			}
			startRelayProcess(b, prefix, upstream)
			var viaRelay, viaClient, direct, directInline latencies
			for range 4 {
				viaRelay = append(viaRelay, runLatencyClient(b, "fifo", prefix, pairs, perPair/4)...)
				viaClient = append(viaClient, runLatencyClient(b, "fifoclient", prefix, pairs, perPair/4)...)
				direct = append(direct, runLatencyClient(b, "direct", upstream, pairs, perPair/4)...)
				directInline = append(directInline, runLatencyClient(b, "direct-inline", upstream, pairs, perPair/4)...)
			}
			var floor latencies
			if pairs == 1 {
				echo := b.TempDir()
				makePair(b, filepath.Join(echo, "m0000"), "")
				startEchoProcess(b, filepath.Join(echo, "m0000"))
				floor = runLatencyClient(b, "fifo-echo", echo, 1, perPair)
			}
			viaRelay.report(b, "relay")
			viaClient.report(b, "relay-fifoclient")
			direct.report(b, "direct")
			directInline.report(b, "direct-inline")
			b.ReportMetric(viaRelay.pct(50)/direct.pct(50), "p50-ratio")
			b.ReportMetric(viaRelay.pct(99)/direct.pct(99), "p99-ratio")
			b.ReportMetric(viaRelay.pct(50)/directInline.pct(50), "p50-ratio-inline")
			b.ReportMetric(viaClient.pct(50)/direct.pct(50), "p50-ratio-fifoclient")
			if floor != nil {
				floor.report(b, "fifo-rtt")
				b.ReportMetric(viaRelay.pct(50)-directInline.pct(50)-floor.pct(50), "relay-added-over-floor-p50-µs")
			}
		})
	}
}

// latencies are request times in microseconds.
type latencies []float64

func (l latencies) pct(p int) float64 {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func (l latencies) report(b *testing.B, name string) {
	b.ReportMetric(l.pct(50), name+"-p50-µs")
	b.ReportMetric(l.pct(99), name+"-p99-µs")
}

const (
	latencyClientEnv = "NYMPH_RELAY_TEST_LATENCY_CLIENT" // mode|target|pairs|requests per pair
	fifoEchoEnv      = "NYMPH_RELAY_TEST_FIFO_ECHO"      // machine directory
)

// runLatencyClient runs a client process: pairs closed-loop daemons, each
// sending n requests through the FIFO pairs under prefix (mode "fifo") or
// to the upstream URL (mode "direct"), and returns every request's time.
func runLatencyClient(b *testing.B, mode, target string, pairs, n int) latencies {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%d", latencyClientEnv, mode, target, pairs, n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("latency client (%s): %v", mode, err)
	}
	var l latencies
	if err := json.Unmarshal(out, &l); err != nil {
		b.Fatalf("latency client (%s): %v", mode, err)
	}
	return l
}

func startEchoProcess(b *testing.B, dir string) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fifoEchoEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		b.Fatalf("echo process: %q", line)
	}
}

func latencyClient(spec string) {
	f := strings.Split(spec, "|")
	pairs, _ := strconv.Atoi(f[2])
	n, _ := strconv.Atoi(f[3])
	body, _ := (&wire.RelayRequest{Endpoint: wire.PathAck, ID: "bench-1", Body: bytes.Repeat([]byte("a"), 100)}).MarshalMsg(nil)
	calls := make([]func() error, pairs)
	for i := range calls {
		switch f[0] {
		case "fifo", "fifo-echo":
			c, err := openPipeClient(filepath.Join(f[1], fmt.Sprintf("m%04d", i)), body)
			if err != nil {
				fail(err)
			}
			c.echoed = f[0] == "fifo-echo"
			calls[i] = c.roundTrip
		case "fifoclient":
			// The daemon's own transport: it opens both pipes per request.
			c, err := fifoclient.New(fifoclient.Config{Dir: filepath.Join(f[1], fmt.Sprintf("m%04d", i))})
			if err != nil {
				fail(err)
			}
			rq := &transport.Request{Endpoint: wire.PathAck, Body: bytes.Repeat([]byte("a"), 100)}
			calls[i] = func() error {
				resp, err := c.RoundTrip(context.Background(), rq)
				if err == nil && resp.Status != 200 {
					err = fmt.Errorf("status %d", resp.Status)
				}
				return err
			}
		case "direct-inline":
			c := &http.Client{Transport: inlinehttp.New(inlinehttp.Options{})}
			calls[i] = func() error { return postDirect(c, f[1]+"/v1/daemon/ack", body) }
		default:
			c := NewClient(0)
			calls[i] = func() error { return postDirect(c, f[1]+"/v1/daemon/ack", body) }
		}
		if err := calls[i](); err != nil { // connections made, untimed
			fail(err)
		}
	}
	all := make([]latencies, pairs)
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make(latencies, 0, n)
			for range n {
				t0 := time.Now()
				if err := calls[i](); err != nil {
					fail(err)
				}
				l = append(l, float64(time.Since(t0).Nanoseconds())/1e3)
			}
			all[i] = l
		}()
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(slices.Concat(all...))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// fifoEcho holds a pair as the relay does (both ends O_RDWR|O_NONBLOCK on
// Go's poller) and writes every frame it reads back as its reply.
func fifoEcho(dir string) {
	open := func(name string) *os.File {
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			fail(err)
		}
		return os.NewFile(uintptr(fd), name)
	}
	req, resp := open("req.fifo"), open("resp.fifo")
	fmt.Println("ready")
	buf := make([]byte, 64<<10)
	have := 0
	for {
		n, err := req.Read(buf[have:])
		if err != nil {
			fail(err)
		}
		have += n
		for have >= 4 {
			size := 4 + int(binary.BigEndian.Uint32(buf[:4]))
			if have < size {
				break
			}
			if _, err := resp.Write(buf[:size]); err != nil {
				fail(err)
			}
			copy(buf, buf[size:have])
			have -= size
		}
	}
}

// openPipeClient is newPipeClient for a process without a testing.B.
func openPipeClient(dir string, payload []byte) (*pipeClient, error) {
	rfd, err := unix.Open(filepath.Join(dir, "resp.fifo"), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	wfd, err := unix.Open(filepath.Join(dir, "req.fifo"), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &pipeClient{resp: os.NewFile(uintptr(rfd), "resp"), req: os.NewFile(uintptr(wfd), "req"),
		buf: make([]byte, 512), frame: frame.Append(nil, payload)}, nil
}
