package planeserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// rawConn is a client connection driven byte by byte, to send what
// net/http's client never would: a body that trickles, stalls or never
// comes.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// head writes a POST's request line and headers; bearer "" sends none.
func (rc *rawConn) head(path string, contentLength int, bearer string) {
	rc.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: plane\r\nContent-Type: %s\r\nContent-Length: %d\r\n", path, wire.ContentTypeMsgpack, contentLength)
	if bearer != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", bearer)
	}
	b.WriteString("\r\n")
	rc.write([]byte(b.String()))
}

func (rc *rawConn) write(p []byte) {
	rc.t.Helper()
	if _, err := rc.c.Write(p); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// trickle writes one byte every gap until the connection fails or stop
// is closed.
func (rc *rawConn) trickle(gap time.Duration, stop <-chan struct{}) {
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(gap):
			}
			if _, err := rc.c.Write([]byte{0xc0}); err != nil {
				return
			}
		}
	}()
}

// response reads one response, failing the test when none comes within d.
func (rc *rawConn) response(d time.Duration) (*http.Response, []byte) {
	rc.t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.t.Fatalf("no response within %s: %v", d, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body
}

// closedWithin fails the test unless the server closes the connection
// within d.
func (rc *rawConn) closedWithin(d time.Duration) {
	rc.t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, rc.br)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		rc.t.Fatalf("connection still open after %s", d)
	}
}

func (ts *testServer) addr() string { return ts.http.Listener.Addr().String() }

// A body announcing 100,000 bytes and sending one every 200 ms — each
// within the idle timeout — is cut off by the whole-body bound: 408 and
// the connection closed, at BodyDeadline(BodyTimeout, 100000).
func TestTrickledBodyIsCutOffByTheWholeBodyBound(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.BodyIdleTimeout, c.BodyTimeout = time.Second, time.Second })
	want := wire.BodyDeadline(time.Second, 100000)
	rc := dialRaw(t, ts.addr())
	start := time.Now()
	rc.head(wire.PathPoll, 100000, daemonToken)
	stop := make(chan struct{})
	defer close(stop)
	rc.trickle(200*time.Millisecond, stop)
	resp, body := rc.response(want + 3*time.Second)
	took := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(decodeError(t, body), "did not arrive in whole within") {
		t.Fatalf("trickled body: %d %q, want 408 saying the body did not arrive in time", resp.StatusCode, body)
	}
	if took < want-100*time.Millisecond {
		t.Fatalf("answered after %s, before the %s whole-body bound", took, want)
	}
	if !resp.Close {
		t.Errorf("408 without Connection: close")
	}
	rc.closedWithin(3 * time.Second)
	ts.hello("still-serving")
}

// A body that stops arriving is cut off by the idle bound.
func TestStalledBodyIsCutOffByTheIdleBound(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.BodyIdleTimeout, c.BodyTimeout = 300*time.Millisecond, 30*time.Second })
	rc := dialRaw(t, ts.addr())
	start := time.Now()
	rc.head(wire.PathAck, 100000, daemonToken)
	rc.write(bytes.Repeat([]byte{0xc0}, 10))
	resp, body := rc.response(3 * time.Second)
	if took := time.Since(start); resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(decodeError(t, body), "no byte of the request body came for 300ms") || took > 2*time.Second {
		t.Fatalf("stalled body: %d %q after %s, want 408 after the 300ms idle bound", resp.StatusCode, body, took)
	}
	rc.closedWithin(3 * time.Second)
}

// The bearer is checked on the headers: a request without it is refused
// at once, without a byte of its body read, and its connection closed.
func TestUnauthenticatedBodyIsNeverRead(t *testing.T) {
	ts := newTestServer(t, nil, nil) // default timeouts: 10 s idle
	for _, c := range []struct{ path, bearer string }{
		{wire.PathHello, ""},
		{wire.PathAck, "wrong"},
		{"/v1/admin/invocations", daemonToken},
	} {
		rc := dialRaw(t, ts.addr())
		start := time.Now()
		rc.head(c.path, 100000, c.bearer)
		resp, _ := rc.response(time.Second)
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Fatalf("%s with bearer %q: %d %v, want 401 and Connection: close", c.path, c.bearer, resp.StatusCode, resp.Header)
		}
		rc.closedWithin(lingerAfterRefusal + 2*time.Second)
		if took := time.Since(start); took > lingerAfterRefusal+2*time.Second {
			t.Fatalf("%s: connection held %s", c.path, took)
		}
	}
}

// A parked poll is not body reading: it outlives both body bounds, and
// still gets the command that arrives while it waits.
func TestLongPollOutlivesTheBodyBounds(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.BodyIdleTimeout, c.BodyTimeout = 100*time.Millisecond, 100*time.Millisecond })
	w := ts.hello("m1")
	got := make(chan wire.PollResponse, 1)
	go func() { got <- ts.poll(w, 5) }()
	ts.waitParked(1)
	time.Sleep(600 * time.Millisecond)
	x := ts.exec(w, "after the bounds", false)
	select {
	case resp := <-got:
		if len(resp.Commands) != 1 || wire.Dispatch(resp.Commands[0]).(wire.ExecCommand).Body.ExecID != x {
			t.Fatalf("parked poll: %+v, want exec %s", resp.Commands, x)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("the parked poll got nothing")
	}
	start := time.Now()
	if resp := ts.poll(w, 1); len(resp.Commands) != 0 || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("an idle poll: %+v after %s, want none after its 1 s wait", resp.Commands, time.Since(start))
	}
}

// Bodies over LargeBodyBytes share MaxLargeBodies slots: with one slot
// held, a body of exactly LargeBodyBytes is read at once, one byte more
// waits LargeBodyWait and is answered 503 with Retry-After; once the slot
// is free, large bodies are read again.
func TestLargeBodiesWaitForASlot(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.MaxLargeBodies, c.LargeBodyWait = 1, 300*time.Millisecond })
	holder := dialRaw(t, ts.addr())
	holder.head(wire.PathAck, wire.LargeBodyBytes+1, daemonToken)
	holder.write([]byte{0xc1})
	deadline := time.Now().Add(5 * time.Second)
	for len(ts.srv.largeBodies) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first large body took no slot")
		}
		time.Sleep(5 * time.Millisecond)
	}

	atLimit := dialRaw(t, ts.addr())
	atLimit.head(wire.PathAck, wire.LargeBodyBytes, daemonToken)
	atLimit.write(bytes.Repeat([]byte{0xc1}, wire.LargeBodyBytes))
	if resp, body := atLimit.response(3 * time.Second); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a body of exactly %d bytes: %d %q, want it read (400 for garbage)", wire.LargeBodyBytes, resp.StatusCode, body)
	}

	over := dialRaw(t, ts.addr())
	start := time.Now()
	over.head(wire.PathAck, wire.LargeBodyBytes+1, daemonToken)
	resp, body := over.response(3 * time.Second)
	if took := time.Since(start); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != fmt.Sprint(wire.LargeBodyRetryAfterS) ||
		took < 250*time.Millisecond || !strings.Contains(decodeError(t, body), "retry later") {
		t.Fatalf("a second large body: %d %v %q after %s, want 503 with Retry-After after the 300ms wait", resp.StatusCode, resp.Header, body, took)
	}
	over.closedWithin(3 * time.Second)

	holder.write(bytes.Repeat([]byte{0xc1}, wire.LargeBodyBytes))
	if resp, _ := holder.response(3 * time.Second); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("the first large body, completed: %d, want 400", resp.StatusCode)
	}
	status, _ := ts.post(wire.PathAck, wire.ContentTypeMsgpack, bytes.Repeat([]byte{0xc1}, wire.LargeBodyBytes+1))
	if status != http.StatusBadRequest {
		t.Fatalf("a large body once the slot is free: %d, want 400", status)
	}
	if n := len(ts.srv.largeBodies); n != 0 {
		t.Fatalf("%d slots still held", n)
	}
}

// A chunked body announces no length: it takes a slot once it grows past
// LargeBodyBytes, and its whole-body bound is its route's limit's.
func TestChunkedBodyTakesASlotWhenItGrowsLarge(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.MaxLargeBodies, c.LargeBodyWait = 1, 200*time.Millisecond })
	ts.srv.largeBodies <- struct{}{} // the only slot is busy
	req, _ := http.NewRequest("POST", ts.http.URL+wire.PathAck, io.MultiReader(bytes.NewReader(bytes.Repeat([]byte{0xc1}, wire.LargeBodyBytes+1))))
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	req.ContentLength = -1
	if status, _ := ts.do(req); status != http.StatusServiceUnavailable {
		t.Fatalf("chunked large body with no slot free: %d, want 503", status)
	}
	req, _ = http.NewRequest("POST", ts.http.URL+wire.PathAck, io.MultiReader(bytes.NewReader(bytes.Repeat([]byte{0xc1}, wire.LargeBodyBytes))))
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	req.ContentLength = -1
	if status, _ := ts.do(req); status != http.StatusBadRequest {
		t.Fatalf("chunked body of exactly %d bytes with no slot free: %d, want it read (400)", wire.LargeBodyBytes, status)
	}
	<-ts.srv.largeBodies
}

// served runs a Server the way nymph serve does (Serve on a listener), so
// that the http.Server's own bounds are the ones tested.
func served(t *testing.T, tweak func(*Config)) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: NewMemStore(), DaemonToken: daemonToken, AdminToken: adminToken,
		PublicURL: "http://" + ln.Addr().String(), Plane: plane.Config{Entropy: rand.Reader}}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s, ln.Addr().String()
}

// Serve bounds the headers (a slow header block is dropped after
// HeaderTimeout, a large one is 431) and idle kept-alive connections.
func TestServeBoundsHeadersAndIdleConnections(t *testing.T) {
	_, addr := served(t, func(c *Config) { c.HeaderTimeout, c.IdleConnTimeout = 300*time.Millisecond, 300*time.Millisecond })

	slow := dialRaw(t, addr)
	slow.write([]byte("POST /v1/daemon/poll HTTP/1.1\r\nHost: plane\r\n"))
	slow.closedWithin(2 * time.Second)

	// net/http allows 4 KiB over MaxHeaderBytes before it refuses.
	for _, c := range []struct {
		size int
		want int
	}{{wire.MaxHeaderBytes - 1024, 200}, {wire.MaxHeaderBytes + 5<<10, http.StatusRequestHeaderFieldsTooLarge}} {
		big := dialRaw(t, addr)
		big.write([]byte("GET /healthz HTTP/1.1\r\nHost: plane\r\nX-Pad: " + strings.Repeat("p", c.size) + "\r\n\r\n"))
		if resp, _ := big.response(2 * time.Second); resp.StatusCode != c.want {
			t.Fatalf("a %d-byte header: %d, want %d", c.size, resp.StatusCode, c.want)
		}
	}

	idle := dialRaw(t, addr)
	idle.write([]byte("GET /healthz HTTP/1.1\r\nHost: plane\r\n\r\n"))
	if resp, _ := idle.response(2 * time.Second); resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	idle.closedWithin(2 * time.Second)
}

// The body bounds hold under Serve too, and Serve's defaults are the wire
// package's.
func TestServeAppliesTheBodyBounds(t *testing.T) {
	s, addr := served(t, func(c *Config) { c.BodyIdleTimeout = 200 * time.Millisecond })
	if s.cfg.HeaderTimeout != wire.HeaderTimeout || s.cfg.BodyTimeout != wire.BodyTimeout || s.cfg.IdleConnTimeout != wire.IdleConnTimeout ||
		cap(s.largeBodies) != wire.DefaultMaxLargeBodies || s.cfg.LargeBodyWait != wire.LargeBodyWait {
		t.Fatalf("defaults: %+v, %d slots", s.cfg, cap(s.largeBodies))
	}
	rc := dialRaw(t, addr)
	rc.head(operator.PathInvocations, 1000, "")
	if resp, _ := rc.response(time.Second); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("operator route without a bearer: %d", resp.StatusCode)
	}
	rc = dialRaw(t, addr)
	rc.head(wire.PathPoll, 1000, daemonToken)
	if resp, _ := rc.response(2 * time.Second); resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a body that never comes: %d, want 408", resp.StatusCode)
	}
}

// readInBlocks reads src through bodyBlocks as readBody does, in reads of
// at most step bytes, and returns the joined body, or false when it was
// over the limit.
func readInBlocks(src []byte, announced, limit int64, step int) ([]byte, bool) {
	var in bodyBlocks
	for {
		p := in.space(announced, limit)
		n := copy(p[:min(len(p), step)], src)
		src = src[n:]
		in.grew(n)
		if in.n > limit {
			return nil, false
		}
		if len(src) == 0 && n < len(p) {
			return in.join(), true
		}
	}
}

// A body is read whole and unchanged whatever the read sizes; announced,
// it is one buffer of its size and a spare byte; chunked past
// wire.LargeBodyBytes, one buffer of the route's limit (never joined, so
// never twice the body); refused at limit+1 bytes and taken at limit.
func TestBodyBlocksHoldTheBodyOnce(t *testing.T) {
	const limit = 3 << 20
	body := make([]byte, 2<<20+12345)
	_, _ = rand.Read(body)
	for _, step := range []int{1 << 10, 64 << 10, 1 << 20} {
		for _, announced := range []int64{int64(len(body)), -1} {
			got, ok := readInBlocks(body, announced, limit, step)
			if !ok || !bytes.Equal(got, body) {
				t.Fatalf("step %d announced %d: ok %v, %d bytes back, equal %v", step, announced, ok, len(got), bytes.Equal(got, body))
			}
			if announced >= 0 && cap(got) != len(body)+1 {
				t.Errorf("announced: cap %d, want %d", cap(got), len(body)+1)
			}
			if announced < 0 && cap(got) != limit+1 {
				t.Errorf("chunked past %d bytes: cap %d, want the route's limit %d plus one", wire.LargeBodyBytes, cap(got), limit+1)
			}
		}
	}
	small := body[:wire.LargeBodyBytes-1]
	if got, ok := readInBlocks(small, -1, limit, 64<<10); !ok || !bytes.Equal(got, small) || cap(got) != len(small) {
		t.Errorf("chunked under %d bytes: ok %v, len %d cap %d, want one exact join", wire.LargeBodyBytes, ok, len(got), cap(got))
	}
	for _, announced := range []int64{limit, -1} {
		at := make([]byte, limit)
		if _, ok := readInBlocks(at, announced, limit, 64<<10); !ok {
			t.Errorf("announced %d: a body of exactly the limit was refused", announced)
		}
	}
	if _, ok := readInBlocks(make([]byte, limit+1), -1, limit, 64<<10); ok {
		t.Error("chunked: a body one byte past the limit was taken")
	}
	if got, ok := readInBlocks(nil, -1, limit, 64<<10); !ok || len(got) != 0 {
		t.Errorf("empty chunked body: ok %v, %d bytes", ok, len(got))
	}
}

// A large body let go marks the heap for one collection, run when the
// next large body takes a slot, and only then.
func TestLargeBodyGarbageIsCollectedOncePerFreedBody(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	before := gcCount()
	ts.srv.collectLargeGarbage()
	if gcCount() != before {
		t.Fatal("collected with no large body freed")
	}
	b := &timedBody{s: ts.srv, rc: http.NewResponseController(httptest.NewRecorder()), announced: wire.LargeBodyBytes + 1}
	if err := b.takeSlot(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.eof = true
	b.finish()
	if !ts.srv.largeBodyFreed.Load() {
		t.Fatal("a large body's slot was freed without marking it")
	}
	if err := b.takeSlot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gcCount() == before {
		t.Error("the next large body took its slot without a collection")
	}
	b.finish()
}

// gcCount counts the collections runtime.GC forced: the runtime's own,
// which a busy machine runs at any time, do not count.
func gcCount() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumForcedGC
}

// A stop with a connection that never sent a request (dialled ahead, or
// stuck in its handshake) still ends cleanly: net/http counts such a
// connection busy for 5 s, past the grace, and Serve closes it rather
// than fail the stop.
func TestServeStopsCleanlyPastAnIdleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Config{Store: NewMemStore(), DaemonToken: daemonToken, AdminToken: adminToken,
		PublicURL: "http://" + ln.Addr().String(), Plane: plane.Config{Entropy: rand.Reader}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 200*time.Millisecond) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // accepted, no request sent
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of its stop")
	}
}
