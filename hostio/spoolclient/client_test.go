package spoolclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

var _ transport.Transport = (*Client)(nil)

// spoolRelay serves <dir>/spool per the layout: it polls req/ for *.frame,
// and answers with resp/<id>.tmp renamed to resp/<id>.frame, then removes
// the request. answer decides each reply; nil means "not now" (the request
// stays and is looked at again on the next poll).
type spoolRelay struct {
	dir      string
	interval time.Duration
	answer   func(id string, env frame.Envelope, body []byte) []byte
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	served   int
}

func startSpoolRelay(t testing.TB, dir string, interval time.Duration, answer func(string, frame.Envelope, []byte) []byte) *spoolRelay {
	r := &spoolRelay{dir: filepath.Join(dir, "spool"), interval: interval, answer: answer,
		stop: make(chan struct{}), done: make(chan struct{})}
	go r.run(t)
	t.Cleanup(func() { close(r.stop); <-r.done })
	return r
}

func (r *spoolRelay) run(t testing.TB) {
	defer close(r.done)
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		ents, _ := os.ReadDir(filepath.Join(r.dir, "req"))
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), ".frame")
			if !ok {
				continue
			}
			reqPath := filepath.Join(r.dir, "req", e.Name())
			data, err := os.ReadFile(reqPath)
			if err != nil {
				continue // given up on meanwhile
			}
			p, _, err := frame.Split(data)
			if err != nil {
				t.Errorf("spool relay: %s: %v", reqPath, err)
				continue
			}
			env, err := frame.ReadEnvelope(p, len(p))
			if err != nil || env.ID != id {
				t.Errorf("spool relay: %s: envelope %+v, %v", reqPath, env, err)
				continue
			}
			reply := r.answer(id, env, p[env.BodyOffset:env.BodyOffset+env.BodyLen])
			if reply == nil {
				continue
			}
			tmp := filepath.Join(r.dir, "resp", id+".tmp")
			if err := os.WriteFile(tmp, frame.Append(nil, reply), 0o660); err != nil {
				t.Errorf("spool relay: %v", err)
				continue
			}
			if err := os.Rename(tmp, filepath.Join(r.dir, "resp", id+".frame")); err != nil {
				t.Errorf("spool relay: %v", err)
			}
			os.Remove(reqPath)
			r.mu.Lock()
			r.served++
			r.mu.Unlock()
		}
	}
}

func echo(id string, env frame.Envelope, body []byte) []byte {
	return testkit.RelayIDReply(id, 200, env.Endpoint+"|"+string(body))
}

func newClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// spoolFiles lists what is left under dir/spool.
func spoolFiles(t testing.TB, dir string) []string {
	var names []string
	for _, sub := range []string{"req", "resp"} {
		ents, err := os.ReadDir(filepath.Join(dir, "spool", sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			names = append(names, sub+"/"+e.Name())
		}
	}
	return names
}

const fast = 5 * time.Millisecond

func TestRoundTripCleansUp(t *testing.T) {
	dir := t.TempDir()
	c := newClient(t, Config{Dir: dir, Interval: fast}) // creates spool/req and spool/resp
	startSpoolRelay(t, dir, fast, echo)
	resp, err := c.RoundTrip(context.Background(), &transport.Request{
		Endpoint: "https://cp.test/v1/daemon/exec/e-9/result", Body: []byte("done"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&transport.Response{Status: 200, Body: []byte("/v1/daemon/exec/e-9/result|done")}, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Errorf("files left after a round trip: %v", left)
	}
}

// Several requests in flight at once, answered in the reverse of the order
// they were sent: each gets its own reply.
func TestSeveralInFlight(t *testing.T) {
	const n = 8
	dir := t.TempDir()
	c := newClient(t, Config{Dir: dir, Interval: fast, Timeout: 20 * time.Second})
	var mu sync.Mutex
	seen, answered := map[string]bool{}, map[string]bool{}
	startSpoolRelay(t, dir, fast, func(id string, env frame.Envelope, body []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		seen[id] = true
		if len(seen) < n {
			return nil // hold every reply until all are in flight
		}
		newest := ""
		for k := range seen {
			if !answered[k] && k > newest {
				newest = k
			}
		}
		if id != newest {
			return nil // answer the newest first
		}
		answered[id] = true
		return echo(id, env, body)
	})
	testkit.AcksAtOnce(t, c, n, func(body string) string { return "/v1/daemon/ack|" + body })
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Errorf("files left: %v", left)
	}
}

func TestGiveUpRemovesTheRequest(t *testing.T) {
	dir := t.TempDir()
	c := newClient(t, Config{Dir: dir, Interval: fast, Timeout: 50 * time.Millisecond})
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Errorf("files left after a timeout: %v", left)
	}

	c = newClient(t, Config{Dir: dir, Interval: fast})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/daemon/poll"})
		errc <- err
	}()
	testkit.WaitUntil(t, 10*time.Second, "the condition", func() bool { return len(spoolFiles(t, dir)) == 1 }) // the request is in place
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want cancellation", err)
	}
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Errorf("files left after cancellation: %v", left)
	}
}

func TestRelayErrorAndForeignReply(t *testing.T) {
	dir := t.TempDir()
	c := newClient(t, Config{Dir: dir, Interval: fast})
	startSpoolRelay(t, dir, fast, func(id string, env frame.Envelope, _ []byte) []byte {
		var rr wire.RelayReply
		switch env.Endpoint {
		case "/down":
			rr = wire.RelayReply{ID: id, RelayError: &wire.RelayReplyError{Message: "no route"}}
		case "/wrong-id":
			rr = wire.RelayReply{ID: "someone-else", Status: 200}
		}
		b, _ := rr.MarshalMsg(nil)
		return b
	})
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/down"})
	var re *frame.RelayError
	if !errors.As(err, &re) {
		t.Errorf("status 0: err = %v, want RelayError", err)
	}
	if _, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/wrong-id"}); err == nil {
		t.Error("a reply naming another id was taken")
	}
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Errorf("files left: %v", left)
	}
}

func TestSweepRemovesOnlyOldLeftovers(t *testing.T) {
	dir := t.TempDir()
	c := newClient(t, Config{Dir: dir})
	old := time.Now().Add(-time.Hour)
	files := map[string]bool{ // name → expected to survive
		"req/a-1.frame": false, "req/a-2.tmp": false, "resp/a-3.frame": false,
		"resp/a-4.tmp":  true,                         // the relay's file being written
		"req/b-1.frame": true, "resp/b-2.frame": true, // fresh
	}
	for name := range files {
		p := filepath.Join(dir, "spool", name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(name, "a-") {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Sweep(time.Now().Add(-time.Minute))
	var want []string
	for name, keep := range files {
		if keep {
			want = append(want, name)
		}
	}
	sort.Strings(want)
	got := spoolFiles(t, dir)
	sort.Strings(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after sweep (-want +got):\n%s", diff)
	}
}

// BenchmarkSpoolRoundTrip measures a request's round trip with both the
// relay and the client polling at the default interval.
func BenchmarkSpoolRoundTrip(b *testing.B) {
	dir := b.TempDir()
	c := newClient(b, Config{Dir: dir})
	startSpoolRelay(b, dir, DefaultInterval, echo)
	req := &transport.Request{Endpoint: "/v1/daemon/ack", Body: make([]byte, 256)}
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := c.RoundTrip(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/roundtrip")
}
