//go:build unix

package fifoclient

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

var _ transport.Transport = (*Client)(nil)

func TestRoundTrip(t *testing.T) {
	dir := pollPair(t)
	relay := startRelay(t, dir, transport.LanePoll, echo)
	c := newClient(t, Config{Dir: dir})

	resp, err := c.RoundTrip(context.Background(), &transport.Request{
		Endpoint:    "http://cp.test:8080/v1/daemon/exec/e-1/chunk",
		ContentType: "application/octet-stream",
		Headers:     map[string]string{"X-LS-Signature": "s1"},
		Body:        []byte("line\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &transport.Response{Status: 200, Body: []byte("/v1/daemon/exec/e-1/chunk|line\n")}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	seen := relay.requests()
	if len(seen) != 1 {
		t.Fatalf("relay saw %d requests", len(seen))
	}
	if !frame.ValidID(seen[0].ID) {
		t.Errorf("request id %q is not a valid relay id", seen[0].ID)
	}
	wantEnv := wire.RelayRequest{Endpoint: "/v1/daemon/exec/e-1/chunk", ContentType: "application/octet-stream",
		Headers: map[string]string{"X-LS-Signature": "s1"}, Body: []byte("line\n")}
	if diff := cmp.Diff(wantEnv, seen[0], cmpopts.IgnoreFields(wire.RelayRequest{}, "ID")); diff != "" {
		t.Errorf("envelope (-want +got):\n%s", diff)
	}
}

func TestLargeBodiesBothWays(t *testing.T) {
	dir := pollPair(t)
	startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte {
		return [][]byte{testkit.RelayIDReply(req.ID, 200, string(bytes.ToUpper(req.Body)))}
	})
	c := newClient(t, Config{Dir: dir})
	body := bytes.Repeat([]byte("abcdefgh"), 300<<10/8) // several pipe buffers
	for range 2 {
		resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/event", Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.Body, bytes.ToUpper(body)) {
			t.Fatalf("body of %d bytes differs", len(resp.Body))
		}
	}
}

func TestLanesUseTheirOwnPair(t *testing.T) {
	dir := pollPair(t)
	mkpair(t, dir, transport.LaneControl)
	ctl := startRelay(t, dir, transport.LaneControl, echo)
	c := newClient(t, Config{Dir: dir})

	resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/ack", Lane: transport.LaneControl})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Body) != "/v1/daemon/ack|" || len(ctl.requests()) != 1 {
		t.Errorf("control lane: %q, relay saw %d", resp.Body, len(ctl.requests()))
	}
	// Nobody serves the poll pair: its own pipes, not the control lane's.
	_, err = c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	if !errors.Is(err, ErrNoRelay) {
		t.Errorf("poll lane without relay: %v, want ErrNoRelay", err)
	}
	if _, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/x", Lane: "../evil"}); err == nil {
		t.Error("a lane with a path separator was accepted")
	}
}

func TestNoRelayIsATransportError(t *testing.T) {
	dir := pollPair(t)
	c := newClient(t, Config{Dir: dir})
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	if !errors.Is(err, ErrNoRelay) || !errors.Is(err, unix.ENXIO) {
		t.Fatalf("err = %v, want ErrNoRelay wrapping ENXIO", err)
	}
	// Missing pipes are an error too, naming the path.
	c = newClient(t, Config{Dir: t.TempDir()})
	if _, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want not-exist", err)
	}
}

func TestRegularFileIsRefused(t *testing.T) {
	dir := pipeDir(t)
	req, resp := Paths(dir, transport.LanePoll)
	for _, p := range []string{req, resp} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, Config{Dir: dir})
	if _, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"}); err == nil {
		t.Fatal("a regular file was used as a pipe")
	}
}

// A reply to a request the daemon gave up on arrives while it waits for the
// next one: it is drained and discarded, and the right reply is taken.
func TestStaleReplyFromTimedOutRequestIsSkipped(t *testing.T) {
	dir := pollPair(t)
	var first string
	relay := startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte {
		if first == "" {
			first = req.ID // stuck upstream: no answer in time
			return nil
		}
		return [][]byte{
			testkit.RelayIDReply(first, 200, "stale"),
			[]byte("\x81\xa2no\xa2id"), // not an id reply at all
			testkit.RelayIDReply(req.ID, 200, "fresh"),
		}
	})
	c := newClient(t, Config{Dir: dir, Timeout: 100 * time.Millisecond})
	if _, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first request: %v, want a timeout", err)
	}
	c.cfg.Timeout = time.Minute
	resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Body) != "fresh" {
		t.Errorf("took %q, want the fresh reply", resp.Body)
	}
	if seen := relay.requests(); len(seen) != 2 || seen[0].ID == seen[1].ID {
		t.Errorf("relay saw %d requests, ids %v", len(seen), seen)
	}
}

// Bytes left in the response pipe before a request (a relay that wrote
// while an earlier reader was still open) are dropped before writing, so
// even a raw-mode client never takes them.
func TestStaleBytesInPipeAreDrained(t *testing.T) {
	for _, mode := range []ReplyMode{ReplyID, ReplyRaw} {
		t.Run(string(mode), func(t *testing.T) {
			dir := pollPair(t)
			_, respPath := Paths(dir, transport.LanePoll)
			// Held, the pipe keeps the stale bytes alive.
			holder := holdPipe(t, respPath)
			stale := append(frame.Append(nil, testkit.RelayIDReply("old-1", 500, "stale")), 0, 0, 0x10) // and a fragment
			if _, err := holder.Write(stale); err != nil {
				t.Fatal(err)
			}
			startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte {
				if req.ID == "" {
					return [][]byte{[]byte("raw fresh")}
				}
				return [][]byte{testkit.RelayIDReply(req.ID, 200, "fresh")}
			})
			c := newClient(t, Config{Dir: dir, Replies: mode})
			resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || !bytes.Contains(resp.Body, []byte("fresh")) {
				t.Errorf("took %d %q, want the fresh reply", resp.Status, resp.Body)
			}
		})
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	dir := pollPair(t)
	got := make(chan string, 4)
	startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte {
		got <- req.ID
		return nil // never answers
	})

	c := newClient(t, Config{Dir: dir, Timeout: 50 * time.Millisecond})
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: err = %v", err)
	}
	<-got

	c = newClient(t, Config{Dir: dir})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/daemon/poll"})
		errc <- err
	}()
	<-got // the request is out; the client now waits on the pipe
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel: err = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RoundTrip ignored cancellation")
	}
}

func TestRelayErrors(t *testing.T) {
	dir := pollPair(t)
	startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte {
		rr := wire.RelayReply{ID: req.ID, Body: []byte("upstream said no")}
		switch req.Endpoint {
		case "/down":
			rr = wire.RelayReply{ID: req.ID, RelayError: &wire.RelayReplyError{Message: "connection refused"}}
		case "/422":
			rr.Status = 422
		case "/refused":
			rr = wire.RelayReply{ID: req.ID, Status: 400, RelayError: &wire.RelayReplyError{Message: "endpoint not allowed"}}
		}
		b, _ := rr.MarshalMsg(nil)
		return [][]byte{b}
	})
	c := newClient(t, Config{Dir: dir})
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/down"})
	var re *frame.RelayError
	if !errors.As(err, &re) || re.Message != "connection refused" {
		t.Errorf("status 0: err = %v, want a RelayError", err)
	}
	for ep, status := range map[string]int{"/422": 422, "/refused": 400} {
		resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: ep})
		if err != nil || resp.Status != status {
			t.Errorf("%s: %v, %v; want status %d", ep, resp, err, status)
		}
	}
}

func TestRawReplies(t *testing.T) {
	fail := func(status int, msg, body string) []byte {
		b, _ := (&wire.RelayErrorReply{RelayError: wire.RelayFailure{Status: wire.Int(status), Message: msg, Body: []byte(body)}}).MarshalMsg(nil)
		return b
	}
	tests := []struct {
		reply   []byte
		want    *transport.Response
		wantErr bool
	}{
		{[]byte{0x81, 0xa8, 'c', 'o', 'm', 'm', 'a', 'n', 'd', 's', 0x90}, &transport.Response{Status: 200, Body: []byte{0x81, 0xa8, 'c', 'o', 'm', 'm', 'a', 'n', 'd', 's', 0x90}}, false},
		{[]byte{}, &transport.Response{Status: 200, Body: []byte{}}, false},
		{fail(0, "dial tcp: refused", ""), nil, true},
		{fail(422, "upstream answered 422", "\x82\xa5error\xa1x\xa5field\xa1y"), &transport.Response{Status: 422, Body: []byte("\x82\xa5error\xa1x\xa5field\xa1y")}, false},
	}
	dir := pollPair(t)
	next := make(chan []byte, 1)
	relay := startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte { return [][]byte{<-next} })
	c := newClient(t, Config{Dir: dir, Replies: ReplyRaw})
	for i, tt := range tests {
		next <- tt.reply
		resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
		if (err != nil) != tt.wantErr {
			t.Errorf("%d: err = %v", i, err)
		}
		if diff := cmp.Diff(tt.want, resp); diff != "" {
			t.Errorf("%d: response (-want +got):\n%s", i, diff)
		}
	}
	for _, r := range relay.requests() {
		if r.ID != "" {
			t.Errorf("raw mode sent id %q", r.ID)
		}
	}
}

// Concurrent requests on one lane go one at a time, and each caller gets
// the reply to its own request.
func TestConcurrentRequestsOnALane(t *testing.T) {
	dir := pollPair(t)
	startRelay(t, dir, transport.LanePoll, echo)
	c := newClient(t, Config{Dir: dir})
	testkit.AcksAtOnce(t, c, 8, func(body string) string { return "/v1/daemon/ack|" + body })
}

// BenchmarkRoundTrip is a small request through a FIFO pair and an
// in-process relay that answers at once: the cost the FIFO transport adds,
// to set beside the spool transport's round trip.
func BenchmarkRoundTrip(b *testing.B) {
	dir := pollPair(b)
	startRelay(b, dir, transport.LanePoll, echo)
	c := newClient(b, Config{Dir: dir})
	req := &transport.Request{Endpoint: "/v1/daemon/ack", Body: make([]byte, 256)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.RoundTrip(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// A frame cut off mid-write (the relay stopped reading) closes the lane
// for StallTimeout, so our next frame is not read as the rest of the cut
// one.
func TestCutOffFrameClosesTheLane(t *testing.T) {
	dir := pollPair(t)
	reqPath, _ := Paths(dir, transport.LanePoll)
	holdPipe(t, reqPath) // a relay that never reads
	c := newClient(t, Config{Dir: dir, Timeout: 100 * time.Millisecond})
	big := make([]byte, 1<<20) // far more than a pipe buffer
	if _, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/event", Body: big}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first: err = %v, want a timeout", err)
	}
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	if err == nil || !strings.Contains(err.Error(), "cut-off frame") {
		t.Fatalf("second: err = %v, want the lane closed", err)
	}
}

// A request waiting for its lane gives up when its context ends.
func TestCancelWhileWaitingForTheLane(t *testing.T) {
	dir := pollPair(t)
	got := make(chan string, 1)
	startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte {
		got <- req.ID
		return nil
	})
	c := newClient(t, Config{Dir: dir, Timeout: 500 * time.Millisecond})
	first := make(chan error, 1)
	go func() {
		_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
		first <- err
	}()
	<-got // the first request holds the lane
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/daemon/poll"}); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting request: err = %v, want cancellation", err)
	}
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("first request: err = %v, want its timeout", err)
	}
}

// A raw relay_error while the client waits for an id reply answers its
// frame (one the relay could not read an id from, or cut off by the
// relay's shutdown before it could): the client fails the request at once
// instead of waiting for an id reply that cannot come.
func TestRawRelayErrorFailsTheWaitingRequest(t *testing.T) {
	dir := pollPair(t)
	startRelay(t, dir, transport.LanePoll, func(req wire.RelayRequest) [][]byte {
		b, _ := (&wire.RelayErrorReply{RelayError: wire.RelayFailure{Status: 503, Message: "relay shutting down"}}).MarshalMsg(nil)
		return [][]byte{b}
	})
	c := newClient(t, Config{Dir: dir, Timeout: time.Minute})
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	var re *frame.RelayError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "shutting down") {
		t.Fatalf("err = %v, want the relay's 503 as a RelayError", err)
	}
}

// A relay that exits with a request in flight (kill -9) sends nothing: the
// client notices that nobody reads its request pipe any more and fails the
// request as ErrNoRelay at once, not at its timeout, though a new relay
// opens the pipe soon after. A frame the dead relay never read is left to
// the next relay, which answers it: the request neither fails nor goes up
// twice.
func TestRelayExitFailsTheWaitingRequest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		readFirst bool // the dead relay took the frame
		wantErr   bool
	}{
		{"frame taken", true, true},
		{"frame left in the pipe", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := pollPair(t)
			reqPath, respPath := Paths(dir, transport.LanePoll)
			dead := holdPipe(t, reqPath)
			c := newClient(t, Config{Dir: dir, Timeout: time.Minute})
			restarted := make(chan struct{})
			defer func() { <-restarted }()
			go func() {
				defer close(restarted)
				if tc.readFirst {
					buf := make([]byte, 4096)
					dead.SetReadDeadline(time.Now().Add(10 * time.Second))
					dead.Read(buf)
				} else {
					time.Sleep(100 * time.Millisecond) // the frame is written
				}
				// The relay dies and a new one holds the pipe soon after
				// (a relay process takes milliseconds to start) and
				// answers what it reads.
				dead.Close()
				time.Sleep(20 * time.Millisecond)
				f, _, err := openFIFO(reqPath, unix.O_RDWR)
				if err != nil {
					t.Error(err)
					return
				}
				r := &fakeRelay{t: t, reqFile: f, resp: respPath, handle: echo, done: make(chan struct{})}
				go r.run()
				t.Cleanup(r.stop)
			}()
			start := time.Now()
			resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll", Body: []byte("b")})
			if tc.wantErr {
				if !errors.Is(err, ErrNoRelay) || !strings.Contains(err.Error(), "exited") {
					t.Fatalf("err = %v, want ErrNoRelay naming the relay's exit", err)
				}
			} else if err != nil || string(resp.Body) != "/v1/daemon/poll|b" {
				t.Fatalf("RoundTrip = %+v, %v; want the next relay's answer", resp, err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("answered after %v, want at once", el)
			}
		})
	}
}

// A lane keeps its pipes open from one request to the next, and opens
// them again when a pipe was replaced under its name: a reply written to
// the new resp pipe is read, not waited for on the old one.
func TestPipesKeptAndAReplacedPairReopened(t *testing.T) {
	dir := pollPair(t)
	startRelay(t, dir, transport.LanePoll, echo)
	c := newClient(t, Config{Dir: dir, Timeout: 10 * time.Second})
	get := func() {
		t.Helper()
		resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll", Body: []byte("b")})
		if err != nil || string(resp.Body) != "/v1/daemon/poll|b" {
			t.Fatalf("RoundTrip = %+v, %v", resp, err)
		}
	}
	get()
	ln, _ := c.lane(transport.LanePoll)
	first := ln.open
	for range 5 {
		get()
	}
	if ln.open != first || first == nil {
		t.Fatalf("the lane's pipes were opened again between requests")
	}
	_, respPath := Paths(dir, transport.LanePoll)
	fresh := filepath.Join(dir, "fresh")
	if err := unix.Mkfifo(fresh, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, respPath); err != nil {
		t.Fatal(err)
	}
	get()
	if ln.open == first {
		t.Fatalf("a replaced resp pipe was not opened afresh")
	}
}

// A relay that answers and then goes away at once (a stop answers what
// finished, then closes its pipes) has its reply taken: the request does
// not fail as lost, to be posted again.
func TestReplyWrittenBeforeTheRelayExitsIsTaken(t *testing.T) {
	for i := range 100 {
		dir := pollPair(t)
		reqPath, respPath := Paths(dir, transport.LanePoll)
		relayReq, _, err := openFIFO(reqPath, unix.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		relayResp, _, err := openFIFO(respPath, unix.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, Config{Dir: dir, Timeout: 10 * time.Second})
		go func() {
			var dec frame.Decoder
			buf := make([]byte, 4096)
			for {
				n, err := relayReq.Read(buf)
				if err != nil {
					return
				}
				dec.Feed(buf[:n])
				if p, ok, _ := dec.Next(); ok {
					env, _ := frame.ReadEnvelope(p, len(p))
					relayResp.Write(frame.Append(nil, testkit.RelayIDReply(env.ID, 200, "done")))
					relayReq.Close() // gone right after its answer
					return
				}
			}
		}()
		resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/ack", Body: []byte("a")})
		if err != nil || string(resp.Body) != "done" {
			t.Fatalf("round %d: %+v, %v; want the reply the relay wrote before it went", i, resp, err)
		}
		relayResp.Close()
		c.lanes[transport.LanePoll].closePair()
	}
}

// A request given up on while its large reply streams in (a cancel, a
// timeout) leaves the rest of that reply to come on resp: the next
// request skips it to its end and takes its own reply, in step, in both
// reply modes.
func TestAbandonedLargeReplyIsSkippedToItsEnd(t *testing.T) {
	for _, mode := range []ReplyMode{ReplyID, ReplyRaw} {
		t.Run(string(mode), func(t *testing.T) {
			dir := pollPair(t)
			reqPath, respPath := Paths(dir, transport.LanePoll)
			relayReq, _, err := openFIFO(reqPath, unix.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			defer relayReq.Close()
			relayResp, _, err := openFIFO(respPath, unix.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			defer relayResp.Close()
			reply := func(id, body string) []byte {
				if id == "" {
					return frame.Append(nil, []byte(body))
				}
				return frame.Append(nil, testkit.RelayIDReply(id, 200, body))
			}
			first := make(chan struct{})
			go func() {
				var dec frame.Decoder
				buf := make([]byte, 4096)
				for n := 0; ; {
					k, err := relayReq.Read(buf)
					if err != nil {
						return
					}
					dec.Feed(buf[:k])
					for {
						p, ok, _ := dec.Next()
						if !ok {
							break
						}
						env, _ := frame.ReadEnvelope(p, len(p))
						n++
						if n == 1 {
							// 4 MiB, of which the first 64 KiB go out
							// before the client gives up, the rest after.
							big := reply(env.ID, strings.Repeat("x", 4<<20))
							relayResp.Write(big[:64<<10])
							close(first)
							time.Sleep(200 * time.Millisecond)
							for off := 64 << 10; off < len(big); off += 256 << 10 {
								relayResp.SetWriteDeadline(time.Now().Add(10 * time.Second))
								relayResp.Write(big[off:min(off+256<<10, len(big))])
							}
							continue
						}
						relayResp.Write(reply(env.ID, "second"))
					}
				}
			}()
			c := newClient(t, Config{Dir: dir, Replies: mode, Timeout: 20 * time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-first; time.Sleep(50 * time.Millisecond); cancel() }()
			if _, err := c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/daemon/blob"}); err == nil {
				t.Fatal("the cancelled request returned a reply")
			}
			resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/ack", Body: []byte("a")})
			if err != nil || !bytes.Contains(resp.Body, []byte("second")) {
				var body []byte
				if resp != nil {
					body = resp.Body[:min(len(resp.Body), 40)]
				}
				t.Fatalf("the next request got %q, %v; want its own reply", body, err)
			}
		})
	}
}

// In raw mode a request queued behind others on its lane still has its
// whole timeout for its reply once its frame is out: it does not time out
// with its frame taken and leave its reply to the next request.
func TestRawTimeoutStartsWhenTheLaneIsHeld(t *testing.T) {
	dir := pollPair(t)
	mkpair(t, dir, transport.LaneControl)
	startRelay(t, dir, transport.LaneControl, func(req wire.RelayRequest) [][]byte {
		time.Sleep(400 * time.Millisecond) // a slow plane, well within the timeout
		return [][]byte{[]byte("reply to " + string(req.Body))}
	})
	c := newClient(t, Config{Dir: dir, Replies: ReplyRaw, Timeout: time.Second})
	var wg sync.WaitGroup
	for _, b := range []string{"ack-1", "ack-2", "ack-3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/ack", Body: []byte(b), Lane: transport.LaneControl})
			if err != nil || string(resp.Body) != "reply to "+b {
				t.Errorf("%s: %v %v", b, resp, err)
			}
		}()
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/presign", Body: []byte("presign"), Lane: transport.LaneControl})
	if err != nil || string(resp.Body) != "reply to presign" {
		t.Fatalf("presign: %v %v", resp, err)
	}
}
