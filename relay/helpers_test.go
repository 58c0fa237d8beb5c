//go:build unix

package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
	"golang.org/x/sys/unix"
)

// deadline bounds every wait in these tests; reaching it is a failure.
const deadline = 20 * time.Second

// fakePlane is a control plane: it echoes the body of every request and
// records what it saw.
type fakePlane struct {
	*httptest.Server
	mu        sync.Mutex
	seen      []seenRequest
	block     chan struct{} // when non-nil, /v1/daemon/poll waits on it
	cancelled int           // polls whose client went away while blocked
}

type seenRequest struct {
	Path, Auth, ContentType string
	Header                  http.Header
	BodyLen                 int
}

func newFakePlane(t testing.TB) *fakePlane {
	fp := &fakePlane{}
	fp.Server = httptest.NewServer(http.HandlerFunc(fp.serve))
	t.Cleanup(fp.Close)
	return fp
}

func (fp *fakePlane) serve(w http.ResponseWriter, r *http.Request) {
	// Large bodies are counted, not held, so the plane itself stays small.
	head := make([]byte, 256)
	n, _ := io.ReadFull(r.Body, head)
	rest, _ := io.Copy(io.Discard, r.Body)
	fp.mu.Lock()
	fp.seen = append(fp.seen, seenRequest{Path: r.URL.Path, Auth: r.Header.Get("Authorization"),
		ContentType: r.Header.Get("Content-Type"), Header: r.Header.Clone(), BodyLen: n + int(rest)})
	block := fp.block
	fp.mu.Unlock()
	switch {
	case strings.HasSuffix(r.URL.Path, "/hello"):
		w.WriteHeader(http.StatusUnprocessableEntity)
		w.Write([]byte("bad-hello"))
		return
	case strings.HasSuffix(r.URL.Path, "/poll") && block != nil:
		select {
		case <-block:
		case <-r.Context().Done():
			fp.mu.Lock()
			fp.cancelled++
			fp.mu.Unlock()
			return
		}
	}
	if rest > 0 {
		fmt.Fprintf(w, "len:%d", n+int(rest))
		return
	}
	w.Write([]byte("echo:"))
	w.Write(head[:n])
}

func (fp *fakePlane) requests() []seenRequest {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return append([]seenRequest(nil), fp.seen...)
}

// wantSeen fails the test unless the plane has seen n requests.
func (fp *fakePlane) wantSeen(t testing.TB, n int) {
	t.Helper()
	if got := len(fp.requests()); got != n {
		t.Fatalf("upstream saw %d requests, want %d", got, n)
	}
}

// startRelay runs a relay on prefix against url until the test ends.
func startRelay(t testing.TB, prefix, url string, mod func(*Config)) (*Relay, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("relay-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Prefix: prefix, Upstream: url, TokenFile: tokFile, SpoolInterval: 10 * time.Millisecond,
		Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg)
	}
	rl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		if err := rl.Run(ctx); err != nil {
			t.Errorf("relay: %v", err)
		}
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(deadline):
			t.Error("relay did not stop")
		}
	})
	select {
	case <-rl.Ready():
	case <-time.After(deadline):
		t.Fatal("relay not ready")
	}
	return rl, cancel, done
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// makePair creates dir (0755) and its req/resp pipes for lane.
func makePair(t testing.TB, dir, lane string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"req", "resp"} {
		if err := unix.Mkfifo(filepath.Join(dir, pipeName(kind, lane)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// envelope encodes a relay request payload.
func envelope(t testing.TB, endpoint, id string, body []byte) []byte {
	t.Helper()
	p, err := (&wire.RelayRequest{Endpoint: endpoint, ID: id, Body: body}).MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// daemonSide is the daemon's end of one pair, as the contract says: resp
// opened for reading first, then req for writing, one frame written, one
// reply frame read.
type daemonSide struct {
	dir, lane string
}

// roundTrip sends payload as one frame and returns the reply's payload.
func (d daemonSide) roundTrip(t testing.TB, payload []byte) []byte {
	t.Helper()
	resp, req := d.open(t)
	defer resp.Close()
	defer req.Close()
	writeAll(t, req, frame.Append(nil, payload))
	return readFrame(t, resp)
}

// openForTest is open, with both ends closed when the test ends.
func (d daemonSide) openForTest(t testing.TB) (resp, req *os.File) {
	t.Helper()
	resp, req = d.open(t)
	t.Cleanup(func() { resp.Close() })
	t.Cleanup(func() { req.Close() })
	return resp, req
}

// open waits until the relay holds req open (ENXIO until then). resp is
// opened read-write: a FIFO read end with no writer reads as end of file at
// once, while one the reader also holds for writing parks in the poller.
func (d daemonSide) open(t testing.TB) (resp, req *os.File) {
	t.Helper()
	rfd, err := unix.Open(filepath.Join(d.dir, pipeName("resp", d.lane)), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	resp = os.NewFile(uintptr(rfd), "resp")
	end := time.Now().Add(deadline)
	for {
		wfd, err := unix.Open(filepath.Join(d.dir, pipeName("req", d.lane)), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			return resp, os.NewFile(uintptr(wfd), "req")
		}
		if !errors.Is(err, unix.ENXIO) || time.Now().After(end) {
			resp.Close()
			t.Fatalf("open req: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func writeAll(t testing.TB, f *os.File, b []byte) {
	t.Helper()
	f.SetWriteDeadline(time.Now().Add(deadline))
	if _, err := f.Write(b); err != nil {
		t.Fatalf("write frame: %v", err)
	}
}

func readFrame(t testing.TB, f *os.File) []byte {
	t.Helper()
	f.SetReadDeadline(time.Now().Add(deadline))
	var hdr [4]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		t.Fatalf("read reply header: %v", err)
	}
	p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(f, p); err != nil {
		t.Fatalf("read reply: %v", err)
	}
	return p
}

func decodeReply(t testing.TB, p []byte) wire.RelayReply {
	t.Helper()
	var r wire.RelayReply
	if _, err := r.UnmarshalMsg(p); err != nil {
		t.Fatalf("decode reply %q: %v", p, err)
	}
	return r
}

func decodeRelayError(t testing.TB, p []byte) wire.RelayFailure {
	t.Helper()
	var r wire.RelayErrorReply
	if _, err := r.UnmarshalMsg(p); err != nil {
		t.Fatalf("decode relay_error %q: %v", p, err)
	}
	return r.RelayError
}

// wantPipes fails the test unless the relay pumps that many pipes and has
// refused that many.
func wantPipes(t testing.TB, rl *Relay, pumps, refused int) {
	t.Helper()
	if p, r := rl.metrics.pumps.Load(), rl.metrics.errs[errPipeRefused].Load(); p != int64(pumps) || r != uint64(refused) {
		t.Fatalf("pumps = %d, refused = %d, want %d and %d", p, r, pumps, refused)
	}
}

// prefixWithPair makes a prefix that holds one machine directory, m1, with
// a main-lane pair, for a test that acts before the relay starts.
func prefixWithPair(t testing.TB) (prefix, dir string) {
	t.Helper()
	prefix = t.TempDir()
	dir = filepath.Join(prefix, "m1")
	makePair(t, dir, "")
	return prefix, dir
}

// relayOnPairs runs a relay against url (mod adjusting its config, as
// startRelay's does) on a prefix that holds a machine directory per name,
// each with a main-lane pair, and returns the relay and the daemon's end
// of each pair, in the order named.
func relayOnPairs(t testing.TB, url string, mod func(*Config), machines ...string) (*Relay, []daemonSide) {
	t.Helper()
	prefix := t.TempDir()
	ds := make([]daemonSide, len(machines))
	for i, m := range machines {
		ds[i] = daemonSide{dir: filepath.Join(prefix, m)}
		makePair(t, ds[i].dir, "")
	}
	rl, _, _ := startRelay(t, prefix, url, mod)
	return rl, ds
}

// relayOnOnePair is relayOnPairs with one machine, m1.
func relayOnOnePair(t testing.TB, url string, mod func(*Config)) (*Relay, daemonSide) {
	t.Helper()
	rl, ds := relayOnPairs(t, url, mod, "m1")
	return rl, ds[0]
}
