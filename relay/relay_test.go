//go:build unix

package relay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/instancelock"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/relay/internal/inlinehttp"
	"github.com/nymphd/nymph/relay/policy"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
	"golang.org/x/sys/unix"
)

func TestRoundTripWithID(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL+"/base/", nil)

	rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "boot1-1", []byte("hi"))))
	if rep.ID != "boot1-1" || rep.Status != 200 || string(rep.Body) != "echo:hi" || rep.RelayError != nil {
		t.Fatalf("reply = %+v", rep)
	}
	got := fp.requests()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	if got[0].Path != "/base/v1/daemon/poll" || got[0].Auth != "Bearer relay-secret" || got[0].ContentType != "application/x-msgpack" {
		t.Fatalf("upstream request = %+v", got[0])
	}
	// Spec 001's transport table: what a daemon sends directly.
	if a := got[0].Header.Values("Accept"); len(a) != 1 || a[0] != "application/x-msgpack" {
		t.Fatalf("upstream Accept = %q, want application/x-msgpack", a)
	}
}

func TestRoundTripRaw(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL, nil)

	if got := d.roundTrip(t, envelope(t, "/v1/daemon/ack", "", []byte("a"))); string(got) != "echo:a" {
		t.Fatalf("raw 2xx reply = %q", got)
	}
	// Non-2xx without an id: a raw relay_error carrying the upstream's body.
	fail := decodeRelayError(t, d.roundTrip(t, envelope(t, "/v1/daemon/hello", "", nil)))
	if fail.Status != 422 || string(fail.Body) != "bad-hello" {
		t.Fatalf("relay_error = %+v", fail)
	}
	// The same with an id: the status and body, no relay_error.
	rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/hello", "h1", nil)))
	if rep.Status != 422 || string(rep.Body) != "bad-hello" || rep.RelayError != nil {
		t.Fatalf("id reply = %+v", rep)
	}
}

func TestHeadersForwardedOnlyXLS(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL, nil)
	p, _ := (&wire.RelayRequest{Endpoint: "/v1/daemon/exec/e-1/chunk", ID: "c1", ContentType: "text/plain",
		Headers: map[string]string{"x-ls-signature": "sig", "Authorization": "Bearer evil", "Cookie": "c"},
		Body:    []byte("log")}).MarshalMsg(nil)
	rep := decodeReply(t, d.roundTrip(t, p))
	if rep.Status != 200 {
		t.Fatalf("reply = %+v", rep)
	}
	got := fp.requests()[0]
	if got.Header.Get("X-Ls-Signature") != "sig" || got.Auth != "Bearer relay-secret" || got.Header.Get("Cookie") != "" || got.ContentType != "text/plain" {
		t.Fatalf("forwarded headers = %v", got.Header)
	}
}

func TestLanesPumpIndependently(t *testing.T) {
	fp := newFakePlane(t)
	fp.block = make(chan struct{})
	prefix, dir := prefixWithPair(t)
	makePair(t, dir, "ctl")
	startRelay(t, prefix, fp.URL, nil)

	// A long-poll parks on the main lane...
	pollDone := make(chan []byte, 1)
	go func() {
		pollDone <- daemonSide{dir: dir}.roundTrip(t, envelope(t, "/v1/daemon/poll", "p1", nil))
	}()
	testkit.WaitUntil(t, deadline, "the poll upstream", func() bool { return len(fp.requests()) == 1 })
	// ...while an ack on the ctl lane goes through.
	rep := decodeReply(t, daemonSide{dir: dir, lane: "ctl"}.roundTrip(t, envelope(t, "/v1/daemon/ack", "a1", []byte("x"))))
	if rep.ID != "a1" || rep.Status != 200 {
		t.Fatalf("ack reply = %+v", rep)
	}
	close(fp.block)
	if rep := decodeReply(t, <-pollDone); rep.ID != "p1" || rep.Status != 200 {
		t.Fatalf("poll reply = %+v", rep)
	}
}

func TestRefusedFrames(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL, nil)

	rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/admin/workers", "x1", nil)))
	if rep.ID != "x1" || rep.Status != 400 || rep.RelayError == nil || !strings.Contains(rep.RelayError.Message, "allow-list") {
		t.Fatalf("disallowed endpoint reply = %+v", rep)
	}
	fail := decodeRelayError(t, d.roundTrip(t, []byte("not msgpack at all")))
	if fail.Status != 400 || !strings.Contains(fail.Message, "envelope") {
		t.Fatalf("garbage reply = %+v", fail)
	}
	fail = decodeRelayError(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "../etc", nil)))
	if fail.Status != 400 || !strings.Contains(fail.Message, "id") {
		t.Fatalf("bad id reply = %+v", fail)
	}
	fp.wantSeen(t, 0)
	// The pipe still works after all that.
	if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "ok", nil))); rep.Status != 200 {
		t.Fatalf("after refusals: %+v", rep)
	}
}

func TestOversizeDrainedThen413(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL, nil)
	resp, req := d.openForTest(t)

	// A frame announcing MaxPayload+1 bytes whose head carries an id: the
	// relay drains every announced byte before it answers 413.
	size := frame.MaxPayload + 1
	head := envelope(t, "/v1/daemon/poll", "big", nil)
	head = head[:len(head)-2] // drop the empty bin; announce a huge one instead
	head = append(head, 0xc6)
	head = binary.BigEndian.AppendUint32(head, uint32(size-len(head)-4))
	go func() {
		hdr := binary.BigEndian.AppendUint32(nil, uint32(size))
		req.Write(hdr)
		req.Write(head)
		zero := make([]byte, 1<<20)
		for left := size - len(head); left > 0; left -= len(zero) {
			if _, err := req.Write(zero[:min(left, len(zero))]); err != nil {
				return
			}
		}
	}()
	rep := decodeReply(t, readFrame(t, resp))
	if rep.ID != "big" || rep.Status != 413 || rep.RelayError == nil {
		t.Fatalf("oversize reply = %+v", rep)
	}
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/poll", "next", nil)))
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "next" || rep.Status != 200 {
		t.Fatalf("frame after the oversize one = %+v", rep)
	}
}

func TestStalledFrameDropped(t *testing.T) {
	fp := newFakePlane(t)
	rl, d := relayOnOnePair(t, fp.URL, func(c *Config) { c.FrameTimeout = 100 * time.Millisecond })
	resp, req := d.openForTest(t)

	full := frame.Append(nil, envelope(t, "/v1/daemon/poll", "lost", []byte("abc")))
	writeAll(t, req, full[:len(full)-2]) // the writer "dies" two bytes short
	testkit.WaitUntil(t, deadline, "the stall to be counted", func() bool { return rl.metrics.errs[errStall].Load() == 1 })
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/poll", "after", nil)))
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "after" {
		t.Fatalf("reply after a stall = %+v", rep)
	}
}

func TestBadFramesOnOnePipeOthersFlow(t *testing.T) {
	fp := newFakePlane(t)
	_, ds := relayOnPairs(t, fp.URL, func(c *Config) { c.FrameTimeout = time.Minute; c.ShutdownGrace = 10 * time.Millisecond }, "bad", "good")
	bad, good := ds[0], ds[1]
	resp, req := bad.open(t)
	defer resp.Close()
	defer req.Close()
	writeAll(t, req, []byte{0, 0, 1, 0, 0x81}) // a partial frame that stays stuck

	for i := range 20 {
		id := "g" + string(rune('a'+i))
		if rep := decodeReply(t, good.roundTrip(t, envelope(t, "/v1/daemon/poll", id, nil))); rep.ID != id {
			t.Fatalf("good pipe reply = %+v", rep)
		}
	}
}

func TestSymlinkEscapeRefused(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	makePair(t, outside, "")
	if err := os.Symlink(outside, filepath.Join(prefix, "escape")); err != nil {
		t.Fatal(err)
	}
	// A pipe that is itself a symlink (even to a pipe inside) is refused.
	makePair(t, filepath.Join(prefix, "real"), "")
	linked := filepath.Join(prefix, "linked")
	os.Mkdir(linked, 0o755)
	os.Symlink(filepath.Join(prefix, "real", "req.fifo"), filepath.Join(linked, "req.fifo"))
	unix.Mkfifo(filepath.Join(linked, "resp.fifo"), 0o600)
	rl, _, _ := startRelay(t, prefix, fp.URL, nil)
	wantPipes(t, rl, 1, 2)
	// A symlink escape appearing later is refused as well.
	other := filepath.Join(t.TempDir(), "later")
	makePair(t, other, "")
	os.Symlink(other, filepath.Join(prefix, "later"))
	testkit.WaitUntil(t, deadline, "the later escape refused", func() bool { return rl.metrics.errs[errPipeRefused].Load() == 3 })
	wantPipes(t, rl, 1, 3)
}

func TestWorldWritableRefused(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	dir := filepath.Join(prefix, "shared")
	makePair(t, dir, "")
	os.Chmod(dir, 0o777)
	pipeDir := filepath.Join(prefix, "pipes")
	makePair(t, pipeDir, "")
	os.Chmod(filepath.Join(pipeDir, "req.fifo"), 0o666)
	rl, stop, stopped := startRelay(t, prefix, fp.URL, nil)
	wantPipes(t, rl, 0, 2)
	// One relay per prefix: the first goes before the second starts.
	stop()
	<-stopped
	rl2, _, _ := startRelay(t, prefix, fp.URL, func(c *Config) { c.AllowSharedWriters = true })
	if got := rl2.metrics.pumps.Load(); got != 2 {
		t.Fatalf("with --allow-shared-writers pumps = %d, want 2", got)
	}
}

func TestDiscoveryAndRemoval(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	rl, _, _ := startRelay(t, prefix, fp.URL, nil)
	dir := filepath.Join(prefix, "late")
	os.Mkdir(dir, 0o755)
	// req first: the pair waits for its resp pipe. A complete pair made
	// after it is pumped once its events are handled, so by then the
	// waiting pair's events were handled too.
	unix.Mkfifo(filepath.Join(dir, "req.fifo"), 0o600)
	makePair(t, filepath.Join(prefix, "sentinel"), "")
	testkit.WaitUntil(t, deadline, "the sentinel pump", func() bool { return rl.metrics.pumps.Load() == 1 })
	os.RemoveAll(filepath.Join(prefix, "sentinel"))
	testkit.WaitUntil(t, deadline, "the sentinel gone", func() bool { return rl.metrics.pumps.Load() == 0 })
	unix.Mkfifo(filepath.Join(dir, "resp.fifo"), 0o600)
	testkit.WaitUntil(t, deadline, "the pump", func() bool { return rl.metrics.pumps.Load() == 1 })
	d := daemonSide{dir: dir}
	if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "p", nil))); rep.Status != 200 {
		t.Fatalf("reply = %+v", rep)
	}
	// Removing req stops the pump: nobody holds the pipe open any more.
	os.Remove(filepath.Join(dir, "req.fifo"))
	testkit.WaitUntil(t, deadline, "the pump to stop", func() bool { return rl.metrics.pumps.Load() == 0 })
	// A machine directory renamed into the prefix counts as appearing.
	staged := filepath.Join(t.TempDir(), "staged")
	makePair(t, staged, "")
	if err := os.Rename(staged, filepath.Join(prefix, "moved")); err != nil {
		t.Skip("rename across temp dirs:", err)
	}
	testkit.WaitUntil(t, deadline, "the moved pair", func() bool { return rl.metrics.pumps.Load() == 1 })
	os.RemoveAll(filepath.Join(prefix, "moved"))
	testkit.WaitUntil(t, deadline, "the removed machine", func() bool { return rl.metrics.pumps.Load() == 0 && rl.metrics.machines.Load() == 1 })
}

func TestRelayStartedAfterPipes(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	for _, m := range []string{"a", "b", "c"} {
		makePair(t, filepath.Join(prefix, m), "")
		makePair(t, filepath.Join(prefix, m), "ctl")
	}
	rl, _, _ := startRelay(t, prefix, fp.URL, nil)
	if got := rl.metrics.pumps.Load(); got != 6 {
		t.Fatalf("pumps = %d, want 6", got)
	}
	for _, m := range []string{"a", "b", "c"} {
		d := daemonSide{dir: filepath.Join(prefix, m), lane: "ctl"}
		if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", m, nil))); rep.ID != m {
			t.Fatalf("reply = %+v", rep)
		}
	}
}

func TestLargeFrameStreamed(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL, nil)
	body := bytes.Repeat([]byte("z"), 3<<20)
	resp, req := d.openForTest(t)
	go req.Write(frame.Append(nil, envelope(t, "/v1/daemon/exec/e1/result", "r1", body)))
	rep := decodeReply(t, readFrame(t, resp))
	if rep.Status != 200 || string(rep.Body) != "len:3145728" {
		t.Fatalf("reply = %+v", rep)
	}
}

func TestShutdownAnswers503(t *testing.T) {
	fp := newFakePlane(t)
	fp.block = make(chan struct{})
	defer close(fp.block)
	prefix := t.TempDir()
	makePair(t, filepath.Join(prefix, "m1"), "")
	_, cancel, done := startRelay(t, prefix, fp.URL, func(c *Config) { c.ShutdownGrace = 50 * time.Millisecond })
	d := daemonSide{dir: filepath.Join(prefix, "m1")}
	resp, req := d.openForTest(t)
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/poll", "parked", nil)))
	testkit.WaitUntil(t, deadline, "the poll upstream", func() bool { return len(fp.requests()) == 1 })
	cancel()
	rep := decodeReply(t, readFrame(t, resp))
	if rep.ID != "parked" || rep.Status != 503 || rep.RelayError == nil {
		t.Fatalf("reply = %+v", rep)
	}
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatal("relay did not exit")
	}
}

func TestTransportFailureIsStatusZero(t *testing.T) {
	fp := newFakePlane(t)
	url := fp.URL
	fp.Close()
	_, d := relayOnOnePair(t, url, nil)
	rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "p", nil)))
	if rep.Status != 0 || rep.RelayError == nil {
		t.Fatalf("reply = %+v", rep)
	}
	fail := decodeRelayError(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "", nil)))
	if fail.Status != 0 || fail.Message == "" {
		t.Fatalf("raw reply = %+v", fail)
	}
}

// A daemon that stops waiting sends its next frame on the same pipe: the
// request still upstream is cancelled, as a closed connection would cancel
// it, and the new frame is served at once instead of queueing behind a
// long-poll.
func TestNewFrameAbandonsRequestInFlight(t *testing.T) {
	fp := newFakePlane(t)
	fp.block = make(chan struct{})
	defer close(fp.block)
	rl, d := relayOnOnePair(t, fp.URL, nil)
	resp, req := d.openForTest(t)
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/poll", "p1", nil)))
	testkit.WaitUntil(t, deadline, "the poll upstream", func() bool { return len(fp.requests()) == 1 })
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/ack", "a2", []byte("x"))))
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "a2" || rep.Status != 200 {
		t.Fatalf("reply = %+v, want a2's", rep)
	}
	testkit.WaitUntil(t, deadline, "the poll cancelled upstream", func() bool {
		fp.mu.Lock()
		defer fp.mu.Unlock()
		return fp.cancelled == 1
	})
	if got := rl.metrics.errs[errAbandoned].Load(); got != 1 {
		t.Fatalf("abandoned = %d", got)
	}
}

// A next frame that came in the same read as the end of a blocked call's
// frame (two frames written at once, the second longer than the rest of
// the pump's read) supersedes the call from the buffer, whole: none of
// its bytes are lost to the watcher's read.
func TestNextFrameAlreadyReadAbandonsRequestInFlight(t *testing.T) {
	fp := newFakePlane(t)
	fp.block = make(chan struct{})
	defer close(fp.block)
	rl, d := relayOnOnePair(t, fp.URL, nil)
	resp, req := d.openForTest(t)
	both := frame.Append(nil, envelope(t, "/v1/daemon/poll", "p1", nil))
	both = frame.Append(both, envelope(t, "/v1/daemon/ack", "a2", bytes.Repeat([]byte("x"), 8000)))
	writeAll(t, req, both)
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "a2" || rep.Status != 200 || string(rep.Body) != "len:8000" {
		t.Fatalf("reply = %+v, want a2's with its 8000 bytes seen", rep)
	}
	if got := rl.metrics.errs[errAbandoned].Load(); got != 1 {
		t.Fatalf("abandoned = %d, want 1", got)
	}
}

// A daemon already holding resp when a pump starts (its request went to
// a relay that died, or it opened resp before retrying req) is sent
// nothing unsolicited: the first frame it reads is the answer to the first
// request it writes, at relay start and at every pump restart.
func TestNothingIsWrittenAtPumpStart(t *testing.T) {
	fp := newFakePlane(t)
	prefix, dir := prefixWithPair(t)
	rfd, err := unix.Open(filepath.Join(dir, "resp.fifo"), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	resp := os.NewFile(uintptr(rfd), "resp")
	defer resp.Close()
	rl, _, _ := startRelay(t, prefix, fp.URL, nil)
	// The pump restarts when its directory is renamed away and back.
	for round := range 3 {
		if round > 0 {
			away := filepath.Join(t.TempDir(), "away")
			if err := os.Rename(dir, away); err != nil {
				t.Fatal(err)
			}
			testkit.WaitUntil(t, deadline, "the pump gone", func() bool { return rl.metrics.pumps.Load() == 0 })
			if err := os.Rename(away, dir); err != nil {
				t.Fatal(err)
			}
			testkit.WaitUntil(t, deadline, "the pump back", func() bool { return rl.metrics.pumps.Load() == 1 })
		}
		resp.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var b [1]byte
		if n, err := resp.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("round %d: read %d bytes at pump start (err %v), want none", round, n, err)
		}
		req := openReq(t, dir, "")
		writeAll(t, req, frame.Append(nil, []byte{}[:0:0]))
		req.Close()
		// An empty payload is not an envelope: the one reply is its 400.
		if fail := decodeRelayError(t, readFrame(t, resp)); fail.Status != 400 {
			t.Fatalf("round %d: first frame = %+v, want the 400 answering the frame written", round, fail)
		}
	}
}

// openReq opens a pair's request pipe for writing once the relay holds it.
func openReq(t testing.TB, dir, lane string) *os.File {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		fd, err := unix.Open(filepath.Join(dir, pipeName("req", lane)), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			return os.NewFile(uintptr(fd), "req")
		}
		if !errors.Is(err, unix.ENXIO) || time.Now().After(end) {
			t.Fatalf("open req: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Raw frames (no id) are answered one for one and in order, pipelined or not,
// as docs/protocol.md ("What a daemon can rely on") has it: a frame written
// while the one before is upstream waits its turn instead of superseding it.
func TestPipelinedRawFramesAnsweredInOrder(t *testing.T) {
	fp := newFakePlane(t)
	fp.block = make(chan struct{})
	rl, d := relayOnOnePair(t, fp.URL, nil)
	resp, req := d.openForTest(t)
	var frames []byte
	frames = frame.Append(frames, envelope(t, "/v1/daemon/poll", "", []byte("p")))
	for _, b := range []string{"a1", "a2", "a3"} {
		frames = frame.Append(frames, envelope(t, "/v1/daemon/ack", "", []byte(b)))
	}
	writeAll(t, req, frames) // four frames back to back, in one write
	testkit.WaitUntil(t, deadline, "the poll upstream", func() bool { return len(fp.requests()) == 1 })
	time.Sleep(3 * watchAfter) // long enough for a watcher to have judged
	close(fp.block)
	for _, want := range []string{"echo:p", "echo:a1", "echo:a2", "echo:a3"} {
		if got := string(readFrame(t, resp)); got != want {
			t.Fatalf("reply = %q, want %q", got, want)
		}
	}
	if got := rl.metrics.errs[errAbandoned].Load(); got != 0 {
		t.Fatalf("abandoned = %d, want 0", got)
	}
}

// The relay holds the resp pipe between replies. A pipe replaced in
// between by a rename (which leaves the pump running) must still get its
// reply, and a reply nobody reads stays in the held pipe without holding
// the pump.
func TestReplyFollowsAReplacedRespPipe(t *testing.T) {
	fp := newFakePlane(t)
	rl, d := relayOnOnePair(t, fp.URL, nil)
	dir := d.dir
	if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", "a1", []byte("x")))); rep.Status != 200 {
		t.Fatalf("first reply = %+v", rep)
	}
	fresh := filepath.Join(dir, "fresh")
	if err := unix.Mkfifo(fresh, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, filepath.Join(dir, "resp.fifo")); err != nil {
		t.Fatal(err)
	}
	// The pump hears of the rename from discovery's inotify event; a reply
	// it wrote before would go to the old pipe (a documented window).
	testkit.WaitUntil(t, deadline, "the rename noticed", func() bool { return rl.metrics.respReplaced.Load() == 1 })
	if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", "a2", []byte("x")))); rep.ID != "a2" || rep.Status != 200 {
		t.Fatalf("reply after the pipe was replaced = %+v", rep)
	}

	// Nobody reading: the pipe the relay holds keeps the reply, and a
	// daemon using ids reads past it to its own.
	req, err := os.OpenFile(filepath.Join(dir, "req.fifo"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/ack", "a3", []byte("x"))))
	req.Close()
	testkit.WaitUntil(t, deadline, "the unread reply written", func() bool { return rl.metrics.replies.Load() == 3 })
	resp, req := d.openForTest(t)
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/ack", "a4", []byte("x"))))
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "a3" {
		t.Fatalf("first reply read = %+v, want the unread a3", rep)
	}
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "a4" {
		t.Fatalf("second reply read = %+v, want a4", rep)
	}
	if n := rl.metrics.pumps.Load(); n != 1 {
		t.Fatalf("pumps = %d, want the one pump throughout", n)
	}
}

// A pair past the pipe budget opens its reply pipe per reply: a reply
// with no reader is dropped (ENXIO), the relay says once that the budget
// is spent, and /status counts the pair.
func TestUnheldReplyPipeDropsAnUnreadReply(t *testing.T) {
	fp := newFakePlane(t)
	// Room for the request pipe only.
	rl, d := relayOnOnePair(t, fp.URL, func(c *Config) { c.PipeBudget = 1 })
	dir := d.dir
	if got := rl.metrics.Snapshot(time.Now()).UnheldReplyPipes; got != 1 {
		t.Fatalf("unheld_reply_pipes = %d, want 1", got)
	}
	req := openReq(t, dir, "")
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/ack", "a1", []byte("x"))))
	req.Close()
	testkit.WaitUntil(t, deadline, "the unread reply dropped", func() bool { return rl.metrics.errs[errReplyDropped].Load() == 1 })
	if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", "a2", []byte("x")))); rep.ID != "a2" {
		t.Fatalf("reply after a dropped one = %+v", rep)
	}
}

// An upstream that does not answer within the relay's timeout gets the
// request cancelled, and the daemon a relay_error (a transport failure,
// status 0) naming the deadline.
func TestUpstreamTimeoutAnswersRelayError(t *testing.T) {
	fp := newFakePlane(t)
	fp.block = make(chan struct{})
	defer close(fp.block)
	_, d := relayOnOnePair(t, fp.URL, func(c *Config) { c.UpstreamTimeout = 300 * time.Millisecond })
	start := time.Now()
	fail := decodeRelayError(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "p1", nil)))
	if fail.Status != 0 || !strings.Contains(fail.Message, "deadline") {
		t.Fatalf("reply = %+v", fail)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 10*time.Second {
		t.Fatalf("answered after %v, want about the 300ms timeout", el)
	}
	testkit.WaitUntil(t, deadline, "the poll cancelled upstream", func() bool {
		fp.mu.Lock()
		defer fp.mu.Unlock()
		return fp.cancelled == 1
	})
}

// A daemon that gave up on a request which the upstream then answers
// quickly (before the pump watches its pipe) must not take that stale
// reply for the one to its new request. A raw reply (no id) is dropped;
// an addressed one is delivered under its own id, which the daemon tells
// apart from its new request's.
func TestQuickReplyToAnAbandonedRequest(t *testing.T) {
	for _, tc := range []struct {
		name, oldID, newID string
		stale              bool // the old reply reaches the daemon first
	}{
		{name: "raw", oldID: "", newID: "", stale: true},
		{name: "addressed", oldID: "p1", newID: "a2", stale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := newFakePlane(t)
			fp.block = make(chan struct{})
			rl, d := relayOnOnePair(t, fp.URL, nil)
			resp, req := d.openForTest(t)
			writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/poll", tc.oldID, nil)))
			testkit.WaitUntil(t, deadline, "the poll upstream", func() bool { return len(fp.requests()) == 1 })
			writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/ack", tc.newID, []byte("x"))))
			close(fp.block) // the poll is answered at once
			if tc.stale && tc.oldID == "" {
				// Raw frames are answered one for one: the old reply comes
				// first, and nothing tells it apart (ids do).
				if old := string(readFrame(t, resp)); old != "echo:" {
					t.Fatalf("first reply = %q, want the old request's", old)
				}
			}
			if tc.stale && tc.oldID != "" {
				if old := decodeReply(t, readFrame(t, resp)); old.ID != tc.oldID {
					t.Fatalf("first reply = %+v, want the old request's, under its id", old)
				}
			}
			got := readFrame(t, resp)
			if tc.newID == "" {
				// A raw reply is the upstream's body itself.
				if string(got) != "echo:x" {
					t.Fatalf("reply = %q, want the new request's", got)
				}
			} else if rep := decodeReply(t, got); rep.ID != tc.newID || rep.Status != 200 || string(rep.Body) != "echo:x" {
				t.Fatalf("reply = %+v, want the new request's", rep)
			}
			wantAbandoned := uint64(0)
			if got := rl.metrics.errs[errAbandoned].Load(); got != wantAbandoned {
				t.Fatalf("abandoned = %d, want %d", got, wantAbandoned)
			}
		})
	}
}

// A header cut short stalls like a payload does: dropped after the stall
// timer, and the next frame is read from a clean start.
func TestStalledHeaderDropped(t *testing.T) {
	fp := newFakePlane(t)
	rl, d := relayOnOnePair(t, fp.URL, func(c *Config) { c.FrameTimeout = 100 * time.Millisecond })
	resp, req := d.openForTest(t)
	writeAll(t, req, []byte{0, 0}) // two of the four length bytes
	testkit.WaitUntil(t, deadline, "the stall to be counted", func() bool { return rl.metrics.errs[errStall].Load() == 1 })
	writeAll(t, req, frame.Append(nil, envelope(t, "/v1/daemon/poll", "after", nil)))
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "after" {
		t.Fatalf("reply after a stalled header = %+v", rep)
	}
}

// A redirect from the upstream is answered as it is: following it would
// send the relay's bearer to another origin.
func TestRedirectIsNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer up.Close()
	_, d := relayOnOnePair(t, up.URL, nil)
	rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", "a1", []byte("x"))))
	if rep.Status != http.StatusTemporaryRedirect || elsewhere.Load() != 0 {
		t.Fatalf("reply = %+v, requests elsewhere = %d", rep, elsewhere.Load())
	}
}

// Frames reach the pump in whatever pieces the daemon's writes make: a
// header split across writes, a payload larger than one buffered read,
// and bytes trickling in one at a time must all come out as the same
// frames, each answered in turn.
func TestFramesInAnyPieces(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL, nil)
	resp, req := d.openForTest(t)
	send := func(b []byte, pieces ...int) {
		for _, n := range pieces {
			writeAll(t, req, b[:n])
			b = b[n:]
			time.Sleep(2 * time.Millisecond) // let the pump read each piece on its own
		}
		writeAll(t, req, b)
	}
	small := frame.Append(nil, envelope(t, "/v1/daemon/ack", "s1", []byte("hello")))
	send(small, 2, 2, 5)
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "s1" || string(rep.Body) != "echo:hello" {
		t.Fatalf("split frame: %+v", rep)
	}
	big := frame.Append(nil, envelope(t, "/v1/daemon/ack", "b1", bytes.Repeat([]byte("z"), 10_000)))
	send(big, 4+100, 3000)
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "b1" || string(rep.Body) != "len:10000" {
		t.Fatalf("frame larger than a buffered read: %+v", rep)
	}
	tiny := frame.Append(nil, envelope(t, "/v1/daemon/ack", "t1", []byte("x")))
	ones := make([]int, len(tiny)-1)
	for i := range ones {
		ones[i] = 1
	}
	send(tiny, ones...)
	if rep := decodeReply(t, readFrame(t, resp)); rep.ID != "t1" || string(rep.Body) != "echo:x" {
		t.Fatalf("frame written a byte at a time: %+v", rep)
	}
}

// Reply pipes are kept open between replies only within the pipe budget;
// past it a reply pipe is closed after each reply, and replies flow the
// same.
func TestReplyPipesKeptWithinTheBudget(t *testing.T) {
	fp := newFakePlane(t)
	// Two request pipes and room for one kept reply pipe.
	rl, ds := relayOnPairs(t, fp.URL, func(c *Config) { c.PipeBudget = 3 }, "m1", "m2")
	for round := range 3 {
		for i, d := range ds {
			id := fmt.Sprintf("m%d-%d", i+1, round)
			if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", id, []byte("x")))); rep.ID != id || rep.Status != 200 {
				t.Fatalf("reply = %+v, want %s's", rep, id)
			}
		}
		if kept := rl.replyFDs.Load(); kept != 1 {
			t.Fatalf("round %d: %d reply pipes kept, want 1", round, kept)
		}
	}
}

// A cleartext upstream reached without a proxy gets the inline HTTP/1.1
// transport; https (for HTTP/2) and a proxied upstream get a pool of
// net/http's.
func TestDefaultTransportByUpstream(t *testing.T) {
	noProxy := func(*http.Request) (*url.URL, error) { return nil, nil }
	viaProxy := func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy.invalid:3128") }
	for _, c := range []struct {
		upstream string
		proxy    func(*http.Request) (*url.URL, error)
		inline   bool
	}{
		{"http://127.0.0.1:8383", noProxy, true},
		{"http://cp.internal/base", noProxy, true},
		{"https://cp.example", noProxy, false},
		{"http://cp.internal", viaProxy, false},
	} {
		base, err := policy.ParseBase(c.upstream)
		if err != nil {
			t.Fatal(err)
		}
		tr := defaultTransport(base, 16, c.proxy, nil)
		_, inline := tr.(*inlinehttp.Transport)
		_, nethttp := tr.(*transportPool)
		if inline != c.inline || inline == nethttp {
			via, _ := c.proxy(nil)
			t.Errorf("%s (proxy %v): transport %T, want inline=%v", c.upstream, via, tr, c.inline)
		}
	}
}

// A control plane that restarts behind the relay closes the connections
// the relay keeps for reuse; the next frames go out on new ones, with no
// relay_error for the daemon.
func TestUpstreamRestartCostsNoFrame(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := &http.Server{Handler: http.HandlerFunc(answerAtOnce)}
	go first.Serve(ln)
	_, d := relayOnOnePair(t, "http://"+addr, nil)
	ack := func(id string) wire.RelayReply {
		return decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", id, []byte("x"))))
	}
	if rep := ack("a-1"); rep.Status != 200 || rep.RelayError != nil {
		t.Fatalf("before the restart: %+v", rep)
	}

	first.Close() // closes the listener and the relay's kept connection
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken before the plane could restart on it: %v", err)
	}
	second := &http.Server{Handler: http.HandlerFunc(answerAtOnce)}
	go second.Serve(ln2)
	t.Cleanup(func() { second.Close() })
	time.Sleep(20 * time.Millisecond) // let the close reach the relay's side
	for i := range 3 {
		if rep := ack(fmt.Sprintf("a-%d", i+2)); rep.Status != 200 || rep.RelayError != nil {
			t.Fatalf("frame %d after the restart: %+v", i+1, rep)
		}
	}
}

// bigReplyPlane answers every request with n bytes of a repeating
// pattern, with a Content-Length or chunked, and status.
func bigReplyPlane(t testing.TB, n int, chunked bool, status int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if !chunked {
			w.Header().Set("Content-Length", fmt.Sprint(n))
		}
		w.WriteHeader(status)
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for left := n; left > 0; left -= len(chunk) {
			w.Write(chunk[:min(left, len(chunk))])
			if chunked {
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func patternOK(b []byte, n int) bool {
	if len(b) != n {
		return false
	}
	for i := range b {
		if b[i] != "0123456789abcdef"[i%16] {
			return false
		}
	}
	return true
}

// Replies far over the 16 MiB the relay once held are streamed into the
// pipe, sized or chunked, raw or with an id, and an error reply's body as
// well; the next frame on the pair is answered as usual.
func TestLargeReplyStreamed(t *testing.T) {
	const n = 20 << 20
	for _, tc := range []struct {
		name    string
		chunked bool
		id      string
		status  int
	}{
		{"sized raw", false, "", 200},
		{"chunked raw", true, "", 200},
		{"sized id", false, "r1", 200},
		{"chunked id", true, "r1", 200},
		{"error raw", false, "", 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := bigReplyPlane(t, n, tc.chunked, tc.status)
			_, d := relayOnOnePair(t, url, nil)
			for round := range 2 {
				p := d.roundTrip(t, envelope(t, "/v1/daemon/poll", tc.id, nil))
				var body []byte
				var status int
				switch {
				case tc.id != "":
					rep := decodeReply(t, p)
					if rep.ID != tc.id || rep.RelayError != nil {
						t.Fatalf("round %d: reply = id %q, relay_error %+v", round, rep.ID, rep.RelayError)
					}
					body, status = rep.Body, int(rep.Status)
				case tc.status != 200:
					fail := decodeRelayError(t, p)
					body, status = fail.Body, int(fail.Status)
				default:
					body, status = p, 200
				}
				if status != tc.status || !patternOK(body, n) {
					t.Fatalf("round %d: status %d, body of %d bytes (pattern ok: %v), want %d and %d bytes",
						round, status, len(body), patternOK(body, n), tc.status, n)
				}
			}
		})
	}
}

// A reply whose framed payload would pass the frame ceiling is refused
// with a relay_error before any byte of it is written.
func TestReplyOverTheCeilingRefused(t *testing.T) {
	url := bigReplyPlane(t, frame.MaxPayload, false, 200)
	_, d := relayOnOnePair(t, url, nil)
	// Raw, the body alone fits the ceiling exactly; with an id the
	// envelope around it does not.
	rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/poll", "big", nil)))
	if rep.RelayError == nil || rep.Status != 0 || !strings.Contains(rep.RelayError.Message, "ceiling") {
		t.Fatalf("reply = %+v, want a relay_error naming the ceiling", rep)
	}
}

// oversizeHeadWithID is the start of a frame announcing size bytes whose
// head carries id, and whose body is announced to fill the rest.
func oversizeHeadWithID(t testing.TB, id string, size int) []byte {
	head := envelope(t, "/v1/daemon/poll", id, nil)
	head = head[:len(head)-2] // drop the empty bin; announce a huge one instead
	head = append(head, 0xc6)
	head = binary.BigEndian.AppendUint32(head, uint32(size-len(head)-4))
	return append(binary.BigEndian.AppendUint32(nil, uint32(size)), head...)
}

// An oversize frame whose bytes stop coming is still answered 413, once
// the stall timer fires, so its daemon is never left without a reply.
func TestStalledOversizeFrameAnswered413(t *testing.T) {
	fp := newFakePlane(t)
	_, d := relayOnOnePair(t, fp.URL, func(c *Config) { c.FrameTimeout = 200 * time.Millisecond })
	resp, req := d.openForTest(t)
	writeAll(t, req, oversizeHeadWithID(t, "big", frame.MaxPayload+1))
	writeAll(t, req, make([]byte, 1<<20)) // then nothing more
	rep := decodeReply(t, readFrame(t, resp))
	if rep.ID != "big" || rep.Status != 413 || rep.RelayError == nil {
		t.Fatalf("reply = %+v, want 413", rep)
	}
}

// Shutdown does not wait for a daemon still writing a frame (the grace is
// for requests upstream): a frame cut off in its header or its payload is
// answered 503 at once, raw when its id was not read yet.
func TestShutdownCutsOffAHalfWrittenFrame(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partial func(t *testing.T) []byte
		id      string
	}{
		{"header", func(*testing.T) []byte { return []byte{0, 0} }, ""},
		{"payload", func(t *testing.T) []byte {
			full := frame.Append(nil, envelope(t, "/v1/daemon/ack", "half", bytes.Repeat([]byte("x"), 100)))
			return full[:len(full)-10]
		}, "half"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := newFakePlane(t)
			prefix := t.TempDir()
			makePair(t, filepath.Join(prefix, "m1"), "")
			_, cancel, done := startRelay(t, prefix, fp.URL, func(c *Config) { c.ShutdownGrace = 10 * time.Second })
			resp, req := daemonSide{dir: filepath.Join(prefix, "m1")}.openForTest(t)
			writeAll(t, req, tc.partial(t))
			time.Sleep(50 * time.Millisecond) // the pump is waiting for the rest
			start := time.Now()
			cancel()
			p := readFrame(t, resp)
			if tc.id == "" {
				if fail := decodeRelayError(t, p); fail.Status != 503 {
					t.Fatalf("reply = %+v, want a raw 503", fail)
				}
			} else if rep := decodeReply(t, p); rep.ID != tc.id || rep.Status != 503 {
				t.Fatalf("reply = %+v, want 503 for %s", rep, tc.id)
			}
			select {
			case <-done:
			case <-time.After(deadline):
				t.Fatal("relay did not exit")
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("shutdown took %v with a 10s grace, want it not to wait for the writer", el)
			}
			fp.wantSeen(t, 0)
		})
	}
}

// A pipe that is a relative symlink staying inside the prefix is refused
// as well: beneath-the-prefix resolution allows it, so only the refusal
// to follow a final symlink stops it, with openat2 and without.
func TestRelativeSymlinkPipeRefused(t *testing.T) {
	prefix := t.TempDir()
	makePair(t, filepath.Join(prefix, "real"), "")
	linked := filepath.Join(prefix, "linked")
	if err := os.Mkdir(linked, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"req", "resp"} {
		if err := os.Symlink(filepath.Join("..", "real", kind+".fifo"), filepath.Join(linked, kind+".fifo")); err != nil {
			t.Fatal(err)
		}
	}
	for _, noOpenat2 := range []bool{false, true} {
		rt, err := openRoot(prefix)
		if err != nil {
			t.Fatal(err)
		}
		rt.noOpenat2.Store(noOpenat2)
		for _, kind := range []string{"req", "resp"} {
			fd, _, err := rt.openChecked("linked/"+kind+".fifo", unix.O_RDWR|unix.O_NONBLOCK, unix.S_IFIFO, false)
			if err == nil {
				unix.Close(fd)
				t.Errorf("openat2 off=%v: %s.fifo, a relative symlink inside the prefix, was opened", noOpenat2, kind)
			} else if !strings.Contains(err.Error(), "symlink") {
				t.Errorf("openat2 off=%v: %s.fifo: %v, want it refused as a symlink", noOpenat2, kind, err)
			}
		}
		rt.close()
	}
	fp := newFakePlane(t)
	rl, _, _ := startRelay(t, prefix, fp.URL, nil)
	wantPipes(t, rl, 1, 1)
}

// TestOnePerPrefix: a second relay on a prefix another one holds is
// refused at Run, naming the holder; once the first stops, it starts.
func TestOnePerPrefix(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	_, stop, stopped := startRelay(t, prefix, fp.URL, nil)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("relay-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Prefix: prefix, Upstream: fp.URL, TokenFile: tokFile, Logger: testLogger(t)}
	second, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = second.Run(context.Background())
	if !errors.Is(err, instancelock.ErrHeld) || !strings.Contains(err.Error(), "relay prefix "+prefix+" is in use by another process (pid "+strconv.Itoa(os.Getpid())) ||
		!strings.Contains(err.Error(), "give this relay another --prefix") {
		t.Fatalf("second relay on the prefix: %v", err)
	}
	stop()
	<-stopped
	startRelay(t, prefix, fp.URL, nil)
}
