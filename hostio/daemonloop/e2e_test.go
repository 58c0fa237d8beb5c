package daemonloop

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/introspect"
	"github.com/nymphd/nymph/hostio/shellexec"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/process"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// harness runs the real driver, the real machine, the HTTP transport,
// shellexec and the process runner against a plane served by httptest.
type harness struct {
	t       *testing.T
	plane   *plane
	srv     *httptest.Server
	sigs    chan daemon.SignalKind
	done    chan struct{} // closed when Run returned; then res is set
	res     Result
	board   *introspect.Board
	workdir string
	logs    *testkit.SyncBuffer
}

func startDaemon(t *testing.T, tweak func(*daemon.Config, *Options, *plane)) *harness {
	t.Helper()
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("bash is needed to run execs")
	}
	h := &harness{t: t, plane: newPlane(), sigs: make(chan daemon.SignalKind, 4), done: make(chan struct{}),
		board: &introspect.Board{}, workdir: t.TempDir(), logs: &testkit.SyncBuffer{}}
	h.srv = httptest.NewServer(h.plane)
	t.Cleanup(h.srv.Close)
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr, err := httpclient.New(httpclient.Options{BaseURL: h.srv.URL, Token: "tok", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemon.DefaultConfig()
	cfg.MachineID, cfg.Hostname, cfg.Label = "m1", "host1", "test"
	cfg.Workdir = h.workdir
	cfg.RetryMinS, cfg.RetryMaxS = 0.05, 0.2
	cfg.MaxInvocations = 4
	cfg.GraceS = 10
	v := "test"
	cfg.Versions = wire.Versions{Daemon: &v}
	opt := Options{
		Transport: tr,
		Runners: runners.NewRegistry(runners.Config{Root: h.workdir, Log: log},
			process.New(process.Options{})),
		ExecOptions: shellexec.Options{DefaultWorkdir: h.workdir},
		Signals:     h.sigs,
		Board:       h.board,
		Versions:    cfg.Versions,
		Log:         log,
	}
	if tweak != nil {
		tweak(&cfg, &opt, h.plane)
	}
	opt.Machine = daemon.New(cfg, rand.New(rand.NewPCG(1, 2)))
	go func() { h.res = Run(context.Background(), opt); close(h.done) }()
	t.Cleanup(func() {
		select {
		case <-h.done:
			return
		default:
		}
		for range 3 {
			h.sigs <- daemon.SignalTerm
		}
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			t.Error("daemon did not exit after three signals")
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", h.logs.String())
		}
	})
	return h
}

// waitFor polls cond under the plane's lock until it holds; the deadline
// is generous because it only matters when the test already failed.
func (h *harness) waitFor(what string, cond func(p *plane) bool) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		h.plane.snapshot(func(p *plane) { ok = cond(p) })
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s\ndaemon log:\n%s", what, h.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) result(execID string) wire.ExecResult {
	h.t.Helper()
	var res wire.ExecResult
	h.waitFor("result of "+execID, func(p *plane) bool {
		r, ok := p.results[execID]
		res = r
		return ok
	})
	return res
}

func (h *harness) exit() Result {
	h.t.Helper()
	select {
	case <-h.done:
		return h.res
	case <-time.After(30 * time.Second):
		h.t.Fatalf("daemon did not exit\n%s", h.logs.String())
	}
	return Result{}
}

// parked waits for the daemon to have a poll parked at the plane.
func (h *harness) parked() {
	h.t.Helper()
	h.waitFor("a poll", func(p *plane) bool { return len(p.polls) > 0 })
}

func execCmd(id, command string, edit func(*wire.Exec)) wire.Command {
	ex := wire.Exec{ExecID: id, Command: command}
	if edit != nil {
		edit(&ex)
	}
	return cmd("c-"+id, wire.KindExec, &ex)
}

func TestHelloAndExec(t *testing.T) {
	h := startDaemon(t, nil)
	h.parked()
	h.plane.push(execCmd("e1", "echo out; echo err >&2; exit 3", nil))
	res := h.result("e1")
	if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" || res.Error != nil {
		t.Fatalf("result %+v", res)
	}
	h.plane.snapshot(func(p *plane) {
		hello := p.hellos[0]
		if hello.MachineID != "m1" || hello.Capabilities.Workdir != h.workdir || len(hello.Capabilities.Runners) == 0 {
			t.Errorf("hello %+v", hello)
		}
		if last := p.polls[len(p.polls)-1].req; last.WorkerID != "w-1" || last.Queue != "default" {
			t.Errorf("poll after hello: %+v", last)
		}
	})
	if st := h.board.Snapshot().Status; st.WorkerID != "w-1" {
		t.Errorf("introspection worker id %q", st.WorkerID)
	}
}

// An exec result the plane answers 503, then drops the connection on, is
// sent again until it arrives: three posts, one result.
func TestExecResultIsSentAgainUntilItArrives(t *testing.T) {
	h := startDaemon(t, func(_ *daemon.Config, _ *Options, p *plane) { p.failResults = []int{http.StatusServiceUnavailable, 0} })
	h.parked()
	h.plane.push(execCmd("e1", "echo once", nil))
	if res := h.result("e1"); res.ExitCode != 0 || res.Stdout != "once\n" {
		t.Fatalf("result %+v", res)
	}
	h.plane.snapshot(func(p *plane) {
		if p.resultPosts != 3 {
			t.Errorf("%d result posts, want 3 (503, no answer, 200)", p.resultPosts)
		}
	})
	if c := h.board.Snapshot().Status.Counters; c.ResultsFailed != 0 {
		t.Errorf("ResultsFailed = %d for a result that arrived", c.ResultsFailed)
	}
}

func TestExecTimeout(t *testing.T) {
	h := startDaemon(t, nil)
	h.parked()
	timeout := wire.Number(0.2)
	h.plane.push(execCmd("slow", "sleep 30", func(ex *wire.Exec) { ex.TimeoutS = &timeout }))
	if res := h.result("slow"); res.ExitCode != wire.ExitTimeout {
		t.Fatalf("timed-out exec: %+v", res)
	}
}

func TestExecTruncation(t *testing.T) {
	h := startDaemon(t, nil)
	h.parked()
	h.plane.push(execCmd("big", "head -c 1100000 /dev/zero | tr '\\0' a; head -c 1100000 /dev/zero | tr '\\0' b >&2", nil))
	res := h.result("big")
	if res.ExitCode != 0 || len(res.Stdout) != 1<<20 || len(res.Stderr) != 1<<20 ||
		res.Error == nil || *res.Error != wire.TruncatedBoth {
		t.Fatalf("truncated exec: exit %d, stdout %d bytes, stderr %d bytes, error %v",
			res.ExitCode, len(res.Stdout), len(res.Stderr), res.Error)
	}
}

func TestExecStreaming(t *testing.T) {
	h := startDaemon(t, nil)
	h.parked()
	sink := h.srv.URL + wire.PathExecChunk("s1")
	h.plane.push(execCmd("s1", "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three", func(ex *wire.Exec) {
		ex.Log = &wire.LogSink{StdoutURL: sink, FlushMS: 20, FlushBytes: 4096}
	}))
	res := h.result("s1")
	if res.ExitCode != 0 || res.Stdout != "" || res.Stderr != "" {
		t.Fatalf("streaming result %+v", res)
	}
	h.plane.snapshot(func(p *plane) {
		if got := string(p.chunks["s1"]); got != "one\ntwo\nthree\n" {
			t.Fatalf("chunks %q", got)
		}
	})
}

func TestSetupWithRefresh(t *testing.T) {
	refreshed := wire.Capabilities{Runners: []string{"process", "docker"}, MaxInvocations: 4}
	h := startDaemon(t, func(_ *daemon.Config, o *Options, _ *plane) {
		o.Refresh = func(context.Context) (wire.Capabilities, error) { return refreshed, nil }
	})
	h.parked()
	h.plane.push(cmd("s1", wire.KindSetup, &wire.Setup{Script: "pwd > where; test -f where", RefreshCapabilities: true}))
	h.waitFor("setup ack", func(p *plane) bool { return len(p.acks) > 0 })
	h.plane.snapshot(func(p *plane) {
		ack := p.acks[0]
		if ack.InvocationID != "setup-s1" || ack.State != wire.StateSucceeded || ack.WorkerID != "w-1" {
			t.Fatalf("setup ack %+v", ack)
		}
	})
	h.waitFor("updated_capabilities on a poll", func(p *plane) bool {
		for _, pl := range p.polls {
			if c := pl.req.UpdatedCapabilities; c != nil && strings.Join(c.Runners, ",") == "process,docker" {
				return true
			}
		}
		return false
	})
	h.plane.push(cmd("s2", wire.KindSetup, &wire.Setup{Script: "exit 7"}))
	h.waitFor("failed setup ack", func(p *plane) bool { return len(p.acks) > 1 })
	h.plane.snapshot(func(p *plane) {
		ack := p.acks[1]
		if ack.InvocationID != "setup-s2" || ack.State != wire.StateFailed || ack.Error == nil ||
			ack.Error.TypeName != wire.ErrTypeScriptFailed || ack.Error.Message != "exit status 7" {
			t.Fatalf("failed setup ack %+v (error %+v)", ack, ack.Error)
		}
	})
}

func TestHibernate(t *testing.T) {
	h := startDaemon(t, nil)
	h.parked()
	var hellos, polls int
	h.plane.snapshot(func(p *plane) { hellos, polls = len(p.hellos), len(p.polls) })
	until := time.Now().Add(500 * time.Millisecond)
	h.plane.push(
		cmd("h1", wire.KindHibernate, &wire.Hibernate{UntilEpochS: wire.Number(float64(until.UnixNano()) / 1e9)}),
		execCmd("discarded", "true", nil),
	)
	// The parked poll (polls-1) carries the hibernate; the next one must
	// wait for the deadline.
	h.waitFor("a poll after the hibernation", func(p *plane) bool { return len(p.polls) > polls })
	h.plane.snapshot(func(p *plane) {
		if at := p.polls[polls].at; at.Before(until) {
			t.Errorf("polled at %v, before the hibernation ended at %v", at, until)
		}
		if len(p.hellos) != hellos {
			t.Errorf("hibernation ended with a new hello")
		}
		if _, ran := p.results["discarded"]; ran {
			t.Errorf("a command after hibernate in the same reply was run")
		}
	})
	if !strings.Contains(h.logs.String(), "state="+daemon.StateHibernating) {
		t.Errorf("state %s never reported:\n%s", daemon.StateHibernating, h.logs.String())
	}
}

func TestDrainWaitsForExec(t *testing.T) {
	h := startDaemon(t, nil)
	h.parked()
	marker := h.workdir + "/started"
	h.plane.push(execCmd("d1", "touch "+marker+"; sleep 0.3; echo finished", nil))
	testkit.WaitFile(t, 30*time.Second, marker)
	h.sigs <- daemon.SignalTerm
	r := h.exit()
	if r.Code != 0 {
		t.Fatalf("drain exit %+v", r)
	}
	h.plane.snapshot(func(p *plane) {
		res, ok := p.results["d1"]
		if !ok || res.ExitCode != 0 || res.Stdout != "finished\n" {
			t.Fatalf("in-flight exec after drain: %+v (posted %v)", res, ok)
		}
	})
}

func TestDrainGraceKills(t *testing.T) {
	h := startDaemon(t, func(c *daemon.Config, _ *Options, _ *plane) { c.GraceS = 0.2 })
	h.parked()
	marker := h.workdir + "/started"
	h.plane.push(execCmd("k1", "touch "+marker+"; sleep 30", nil))
	testkit.WaitFile(t, 30*time.Second, marker)
	h.sigs <- daemon.SignalTerm
	if r := h.exit(); r.Code != 0 {
		t.Fatalf("drain exit %+v", r)
	}
	h.plane.snapshot(func(p *plane) {
		if res, ok := p.results["k1"]; !ok || res.ExitCode != wire.ExitSpawnFailed {
			t.Fatalf("killed exec: %+v (posted %v)", res, ok)
		}
	})
}

func TestHelloRejectAnd422(t *testing.T) {
	reject := func(_ *daemon.Config, _ *Options, p *plane) {
		p.helloReply = func(wire.HelloRequest) (int, []byte) {
			b, _ := (&wire.HelloResponse{Reject: &wire.Reject{Code: wire.RejectProtocolMismatch, Message: "too old"}}).MarshalMsg(nil)
			return 200, b
		}
	}
	if r := startDaemon(t, reject).exit(); r.Code != 2 || !strings.Contains(r.Reason, wire.RejectProtocolMismatch) {
		t.Fatalf("reject: %+v", r)
	}
	invalid := func(_ *daemon.Config, _ *Options, p *plane) {
		p.helloReply = func(wire.HelloRequest) (int, []byte) {
			b, _ := (&wire.ValidationError{Error: "missing", Field: "capabilities.runners"}).MarshalMsg(nil)
			return 422, b
		}
	}
	if r := startDaemon(t, invalid).exit(); r.Code != 2 || !strings.Contains(r.Reason, "capabilities.runners") {
		t.Fatalf("422: %+v", r)
	}
}

func TestRunThroughRunner(t *testing.T) {
	h := startDaemon(t, nil)
	h.parked()
	script := "echo hi"
	h.plane.push(cmd("r1", wire.KindRun, &wire.Run{InvocationID: "inv1", Script: &script}),
		cmd("r2", wire.KindRun, &wire.Run{InvocationID: "inv2", RunConfig: wire.RunConfig{Runner: "nope"}}))
	h.waitFor("two acks", func(p *plane) bool { return len(p.acks) == 2 })
	h.plane.snapshot(func(p *plane) {
		byID := map[string]wire.Ack{}
		for _, a := range p.acks {
			byID[a.InvocationID] = a
		}
		if a := byID["inv1"]; a.State != wire.StateSucceeded {
			t.Errorf("script run: %+v", a)
		}
		if a := byID["inv2"]; a.State != wire.StateFailed || a.Error == nil || a.Error.Message != "unknown runner kind: nope" {
			t.Errorf("unknown runner: %+v %+v", a, a.Error)
		}
	})
	h.waitFor("run outcome counted", func(*plane) bool {
		return h.board.Snapshot().RunOutcomes[wire.StateSucceeded] == 1
	})
}

func TestKeepAliveZeroExitsWhenIdle(t *testing.T) {
	h := startDaemon(t, func(c *daemon.Config, _ *Options, p *plane) {
		c.KeepAliveS = 0
		p.maxPark = 50 * time.Millisecond
	})
	h.plane.push(execCmd("only", "echo once", nil))
	if r := h.exit(); r.Code != 0 {
		t.Fatalf("idle exit %+v", r)
	}
	h.plane.snapshot(func(p *plane) {
		if res, ok := p.results["only"]; !ok || res.Stdout != "once\n" {
			t.Fatalf("the one job: %+v (posted %v)", res, ok)
		}
	})
}

// relayLike behaves as a FIFO relay does toward the plane: requests on
// the poll lane go one at a time, and cancelling one only abandons its
// reply — the upstream request keeps going and may still take commands.
type relayLike struct {
	p      *plane
	pollMu sync.Mutex
}

func (*relayLike) CanWithdraw() bool { return false }

func (r *relayLike) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	if req.Lane != transport.LanePoll {
		return r.p.RoundTrip(ctx, req)
	}
	type answer struct {
		resp *transport.Response
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		r.pollMu.Lock()
		defer r.pollMu.Unlock()
		resp, err := r.p.RoundTrip(context.Background(), req)
		ch <- answer{resp, err}
	}()
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestRelayedPollsLoseNoCommand(t *testing.T) {
	h := startDaemon(t, func(_ *daemon.Config, o *Options, p *plane) {
		o.Transport = &relayLike{p: p}
	})
	h.parked()
	for i := range 3 {
		id := fmt.Sprintf("r%d", i)
		h.plane.push(execCmd(id, "echo "+id, nil))
		if res := h.result(id); res.Stdout != id+"\n" {
			t.Fatalf("exec %s: %+v", id, res)
		}
	}
}

// A poll the daemon replaces on a wake may already have been answered with
// commands (the plane wrote the reply just as the exec finished). The
// daemon lets that request finish instead of cutting it off, so the
// commands run instead of being lost with the reply.
func TestWakeKeepsTheReplacedPollsReply(t *testing.T) {
	h := startDaemon(t, func(_ *daemon.Config, o *Options, p *plane) {
		p.overtakeHandsOff = true
		o.Transport = p
	})
	h.plane.push(execCmd("e1", "sleep 0.3", nil))
	// e1 is running and the next poll is parked: queue e2 for it to be
	// handed over only when e1's wake replaces that poll.
	h.waitFor("the poll after e1", func(p *plane) bool { return len(p.polls) >= 2 && p.handOff != nil })
	h.plane.push(execCmd("e2", "echo handed over", nil))
	if res := h.result("e2"); res.Stdout != "handed over\n" {
		t.Fatalf("e2 result %+v", res)
	}
}

// Against a plane that leaves an overtaken poll parked, replaced polls do
// not pile up: only the latest is left to finish, so two polls are live at
// once however many execs run (a third may be seen at the plane while the
// one cut off is still being torn down; without the bound it grows with
// every exec).
func TestReplacedPollsDoNotPileUp(t *testing.T) {
	h := startDaemon(t, func(_ *daemon.Config, _ *Options, p *plane) { p.keepOvertaken = true })
	h.parked()
	for i := range 12 {
		id := fmt.Sprintf("e%d", i)
		h.plane.push(execCmd(id, "true", nil))
		if res := h.result(id); res.ExitCode != 0 {
			t.Fatalf("%s: %+v", id, res)
		}
	}
	h.plane.snapshot(func(p *plane) {
		if p.parkedMax > 3 {
			t.Fatalf("%d polls were parked at once, want at most 3", p.parkedMax)
		}
	})
}
