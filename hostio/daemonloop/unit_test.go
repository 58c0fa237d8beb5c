package daemonloop

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

func TestSetupResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    runners.Outcome
		want daemon.SetupFinished
		err  bool
	}{
		{"success", runners.Outcome{State: wire.StateSucceeded}, daemon.SetupFinished{CommandID: "c"}, false},
		{"exit status", runners.ScriptExited(7), daemon.SetupFinished{CommandID: "c", ExitCode: 7}, false},
		{"signal", runners.Failed(wire.ErrTypeScriptFailed, "signal: killed"), daemon.SetupFinished{CommandID: "c", ExitCode: -1, Signal: "signal: killed"}, false},
		{"killed", runners.Killed(), daemon.SetupFinished{CommandID: "c", ExitCode: -1, Killed: true}, false},
		{"spawn failure", runners.Failed(wire.ErrTypeDaemon, "no bash"), daemon.SetupFinished{CommandID: "c", ExitCode: -1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := setupResult("c", tc.o)
			if (got.Err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", got.Err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(daemon.SetupFinished{}, "Err")); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

// recordingTransport stands for a relay carrier, which cannot withdraw.
type recordingTransport struct{ got []*transport.Request }

func (*recordingTransport) CanWithdraw() bool { return false }

func (r *recordingTransport) RoundTrip(_ context.Context, req *transport.Request) (*transport.Response, error) {
	r.got = append(r.got, req)
	return &transport.Response{Status: 200}, nil
}

// A control plane hands out absolute log-sink URLs; through a relay the
// ones on its own origin travel as endpoint paths (with the daemon's
// bearer), and any other is refused before anything is sent.
func TestThroughRelay(t *testing.T) {
	rec := &recordingTransport{}
	tr, err := ThroughRelay(rec, "https://plane.example:8443/nymph/", "tok")
	if err != nil {
		t.Fatal(err)
	}
	if tr.CanWithdraw() {
		t.Error("through a relay a request can be withdrawn; the carrier says it cannot")
	}
	orig := map[string]string{"X-LS-Signature": "s"}
	mapped := map[string]string{
		wire.PathPoll: wire.PathPoll,
		"https://plane.example:8443/nymph/v1/daemon/exec/x1/chunk": "/v1/daemon/exec/x1/chunk",
		"HTTPS://Plane.Example:8443/nymph/v1/daemon/exec/x2/chunk": "/v1/daemon/exec/x2/chunk",
		"//plane.example:8443/nymph/v1/daemon/exec/x3/chunk":       "/v1/daemon/exec/x3/chunk",
	}
	for endpoint, want := range mapped {
		rec.got = nil
		if _, err := tr.RoundTrip(context.Background(), &transport.Request{Endpoint: endpoint, Headers: orig}); err != nil {
			t.Errorf("%s: %v", endpoint, err)
			continue
		}
		if got := rec.got[0]; got.Endpoint != want || got.Headers[wire.HeaderDaemonAuthorization] != "Bearer tok" || got.Headers["X-LS-Signature"] != "s" {
			t.Errorf("%s went out as %s with headers %v, want %s with the bearer", endpoint, got.Endpoint, got.Headers, want)
		}
	}
	if len(orig) != 1 {
		t.Fatalf("caller's header map modified: %v", orig)
	}
	refused := map[string]string{
		"https://sink.example/v1/daemon/exec/x/chunk":                 "not on the control plane's origin https://plane.example:8443",
		"http://plane.example:8443/nymph/v1/daemon/exec/x/chunk":      "not on the control plane's origin",
		"https://plane.example/nymph/v1/daemon/exec/x/chunk":          "not on the control plane's origin",
		"https://plane.example:8443/other/v1/daemon/exec/x/chunk":     `outside the control plane's path "/nymph/"`,
		"https://plane.example:8443/nymphs/v1/daemon/exec/x/chunk":    `outside the control plane's path "/nymph/"`,
		"https://plane.example:8443/nymph/v1/daemon/exec/x/chunk?a=1": "no query or fragment",
		"https://u:secret@sink.example/chunk":                         "not on the control plane's origin",
	}
	for endpoint, want := range refused {
		rec.got = nil
		_, err := tr.RoundTrip(context.Background(), &transport.Request{Endpoint: endpoint})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %v, want one saying %q (and no password)", endpoint, err, want)
		}
		if len(rec.got) != 0 {
			t.Errorf("%s was sent through the relay: %+v", endpoint, rec.got[0])
		}
	}

	// Default ports are the scheme's; no token adds no header.
	rec.got = nil
	tr, err = ThroughRelay(rec, "http://127.0.0.1", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.RoundTrip(context.Background(), &transport.Request{Endpoint: "http://127.0.0.1:80/v1/daemon/exec/y/chunk"}); err != nil {
		t.Fatal(err)
	}
	if got := rec.got[0]; got.Endpoint != "/v1/daemon/exec/y/chunk" || got.Headers[wire.HeaderDaemonAuthorization] != "" {
		t.Errorf("without a token: %s %v", got.Endpoint, got.Headers)
	}
	for _, bad := range []string{"", "plane.example", "ftp://plane.example", "http://"} {
		if _, err := ThroughRelay(rec, bad, "tok"); err == nil {
			t.Errorf("[server] url %q accepted", bad)
		}
	}
}

// fakeClock fires AfterFunc callbacks only when the test advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// next reports the earliest live timer's deadline.
func (c *fakeClock) next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best time.Time
	for _, t := range c.timers {
		if !t.stopped && (best.IsZero() || t.at.Before(best)) {
			best = t.at
		}
	}
	return best, !best.IsZero()
}

func (c *fakeClock) advanceTo(at time.Time) {
	c.mu.Lock()
	c.now = at
	var due []func()
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(at) {
			t.stopped = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// flakyPlane refuses the first hello (no response at all), then welcomes.
type flakyPlane struct {
	mu     sync.Mutex
	hellos []time.Time
	clock  *fakeClock
	polled chan struct{}
}

func (*flakyPlane) CanWithdraw() bool { return true }

func (f *flakyPlane) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	switch req.Endpoint {
	case wire.PathHello:
		f.mu.Lock()
		f.hellos = append(f.hellos, f.clock.Now())
		n := len(f.hellos)
		f.mu.Unlock()
		if n == 1 {
			return nil, errors.New("connection refused")
		}
		id := "w"
		b, _ := (&wire.HelloResponse{WorkerID: &id}).MarshalMsg(nil)
		return &transport.Response{Status: 200, Body: b}, nil
	case wire.PathPoll:
		select {
		case f.polled <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &transport.Response{Status: 404}, nil
}

func TestBackoffTimerUsesInjectedClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start}
	fp := &flakyPlane{clock: clock, polled: make(chan struct{}, 1)}
	cfg := daemon.DefaultConfig()
	cfg.MachineID, cfg.Workdir = "m", t.TempDir()
	cfg.RetryMinS, cfg.RetryMaxS = 5, 60
	sigs := make(chan daemon.SignalKind, 3)
	done := make(chan Result, 1)
	go func() {
		done <- Run(context.Background(), Options{Machine: daemon.New(cfg, rand.New(rand.NewPCG(1, 2))),
			Transport: fp, Clock: clock, Signals: sigs})
	}()
	// The failed hello arms the backoff timer on the fake clock; nothing
	// else happens until the test moves the clock.
	var at time.Time
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		if at, ok = clock.next(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no backoff timer armed after the failed hello")
		}
		time.Sleep(time.Millisecond)
	}
	if wait := at.Sub(start); wait < 5*time.Second || wait > 10*time.Second {
		t.Fatalf("backoff %v, want retry_min_s 5 plus at most 5 s of jitter", wait)
	}
	clock.advanceTo(at)
	select {
	case <-fp.polled:
	case <-time.After(30 * time.Second):
		t.Fatal("no poll after the retried hello")
	}
	fp.mu.Lock()
	if len(fp.hellos) != 2 || !fp.hellos[1].Equal(at) {
		t.Errorf("hellos at %v, want the retry at %v", fp.hellos, at)
	}
	fp.mu.Unlock()
	sigs <- daemon.SignalTerm
	select {
	case r := <-done:
		if r.Code != 0 {
			t.Fatalf("exit %+v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}
