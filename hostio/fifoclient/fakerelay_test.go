//go:build unix

package fifoclient

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// mkpair creates a lane's FIFO pair in dir, as a provisioning script would.
func mkpair(t testing.TB, dir string, l transport.Lane) {
	t.Helper()
	req, resp := Paths(dir, l)
	for _, p := range []string{req, resp} {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			t.Fatalf("mkfifo %s: %v", p, err)
		}
	}
}

// handler answers one request frame with zero or more reply payloads,
// written in order, each through its own open of the response pipe.
type handler func(req wire.RelayRequest) [][]byte

// fakeRelay serves one pipe pair per the relay contract: req held O_RDWR,
// resp opened O_WRONLY|O_NONBLOCK per reply and closed after.
type fakeRelay struct {
	t       testing.TB
	reqFile *os.File
	resp    string
	handle  handler
	done    chan struct{}
	mu      sync.Mutex
	seen    []wire.RelayRequest
	dropped int // replies the daemon was not waiting for (ENXIO)
}

func startRelay(t testing.TB, dir string, l transport.Lane, h handler) *fakeRelay {
	t.Helper()
	req, resp := Paths(dir, l)
	f, _, err := openFIFO(req, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeRelay{t: t, reqFile: f, resp: resp, handle: h, done: make(chan struct{})}
	go r.run()
	t.Cleanup(r.stop)
	return r
}

func (r *fakeRelay) stop() {
	r.reqFile.Close()
	<-r.done
}

func (r *fakeRelay) run() {
	defer close(r.done)
	var dec frame.Decoder
	buf := make([]byte, 4096)
	for {
		n, err := r.reqFile.Read(buf)
		dec.Feed(buf[:n])
		for {
			p, ok, derr := dec.Next()
			if derr != nil {
				r.t.Errorf("fake relay: %v", derr)
				return
			}
			if !ok {
				break
			}
			env, err := frame.ReadEnvelope(p, len(p))
			if err != nil {
				r.t.Errorf("fake relay: bad envelope: %v", err)
				return
			}
			req := wire.RelayRequest{Endpoint: env.Endpoint, Headers: env.Headers, ContentType: env.ContentType,
				ID: env.ID, Body: append([]byte{}, p[env.BodyOffset:env.BodyOffset+env.BodyLen]...)}
			r.mu.Lock()
			r.seen = append(r.seen, req)
			r.mu.Unlock()
			for _, reply := range r.handle(req) {
				r.reply(reply)
			}
		}
		if err != nil {
			return // closed by stop
		}
	}
}

func (r *fakeRelay) reply(payload []byte) {
	fd, err := unix.Open(r.resp, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENXIO) {
		r.mu.Lock()
		r.dropped++
		r.mu.Unlock()
		return
	}
	if err != nil {
		r.t.Errorf("fake relay: open %s: %v", r.resp, err)
		return
	}
	f := os.NewFile(uintptr(fd), r.resp)
	defer f.Close()
	if _, err := f.Write(frame.Append(nil, payload)); err != nil && !errors.Is(err, unix.EPIPE) {
		r.t.Errorf("fake relay: write %s: %v", r.resp, err)
	}
}

func (r *fakeRelay) requests() []wire.RelayRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.RelayRequest(nil), r.seen...)
}

// echo answers every request with status 200 and "endpoint|body".
func echo(req wire.RelayRequest) [][]byte {
	return [][]byte{testkit.RelayIDReply(req.ID, 200, req.Endpoint+"|"+string(req.Body))}
}

func newClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pollPair is a machine directory holding the poll lane's pipe pair.
func pollPair(t testing.TB) string {
	t.Helper()
	dir := pipeDir(t)
	mkpair(t, dir, transport.LanePoll)
	return dir
}

// holdPipe opens a pipe read-write, as a relay holds it (or a daemon's
// earlier reader did), until the test ends.
func holdPipe(t testing.TB, path string) *os.File {
	t.Helper()
	f, _, err := openFIFO(path, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func pipeDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "machine-1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
