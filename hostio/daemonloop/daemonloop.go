// Package daemonloop drives the daemon state machine (wirecore/daemon): it
// feeds it events — responses, exits, timer fires, signals — one at a time
// from a single goroutine, and carries out the effects it returns with the
// hostio adapters: the transport for hello, poll, acks, results and log
// chunks, shellexec for execs, the runner registry for runs and setups,
// real timers, and the introspection board.
//
// It decides nothing about the protocol: when to poll, how long to back
// off, when to drain or exit are the machine's. It decides only how each
// effect becomes I/O: polls cancellable, except one replaced on a wake,
// which is left to finish so that commands already in its reply are not
// lost; execs and runs in their own goroutines, setups on one serial
// worker, posts on the control lane with failures reported back rather
// than retried here.
//
// The output of runs is the driver's too: the core reports which runs are
// in flight in each poll's invocations (with an empty stdout_tail, as it
// sees no output), and the driver adds their tails. Each run it starts gets
// a runners.Tail, kept by invocation id until the run ends; sendPoll
// fills every reported run's stdout_tail from it just before the
// poll is encoded (inflight.go). The tail is thus as fresh as the poll: one
// per long-poll, never a poll more.
package daemonloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/nymphd/nymph/hostio/introspect"
	"github.com/nymphd/nymph/hostio/payload"
	"github.com/nymphd/nymph/hostio/shellexec"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Machine is the state machine the loop drives; *daemon.Machine is one.
type Machine interface {
	Step(now time.Time, ev daemon.Event) []daemon.Effect
	Status() daemon.Status
}

// Clock is the loop's only source of time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is an armed AfterFunc.
type Timer interface{ Stop() bool }

// SystemClock is the real clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// ExecFunc runs one exec to completion (shellexec.Run).
type ExecFunc func(ctx context.Context, ex wire.Exec, opt shellexec.Options) wire.ExecResult

// Options are the loop's collaborators. Machine and Transport are
// required; everything else has a working default or is optional.
type Options struct {
	Machine Machine
	// Transport carries every request. When it cannot withdraw a request
	// it has sent (CanWithdraw false: fifo, spool), cancelling only
	// abandons the reply, while the relay keeps the upstream poll parked
	// and the control plane may still hand it commands. The loop then
	// never cancels a poll: a poll the machine cancelled is left to
	// finish, and the commands it brings are still fed back (and run). The
	// relay serves one request per lane at a time, so the wake poll simply
	// queues behind it.
	Transport transport.Transport
	// Runners carries runs and setups through the workdir contract; nil
	// fails every run with RunnerUnavailable.
	Runners *runners.Registry
	// Exec defaults to shellexec.Run; ExecOptions are passed to it, with
	// the chunk poster filled in by the loop.
	Exec        ExecFunc
	ExecOptions shellexec.Options
	// Refresh re-runs host detection after a setup with
	// refresh_capabilities; nil answers with an error.
	Refresh func(ctx context.Context) (wire.Capabilities, error)
	// Signals delivers SIGTERM/SIGINT, already mapped to the core's kinds.
	Signals <-chan daemon.SignalKind
	Clock   Clock
	// Board, when set, receives a snapshot after every step.
	Board    *introspect.Board
	Versions wire.Versions
	Log      *slog.Logger
	// Keys carries out rotate_key; nil (a daemon without an identity)
	// logs the command and skips it.
	Keys KeyRotator
	// Revoked delivers the control plane's word that this host's key is
	// revoked (hostio/signer reports it); the machine then exits.
	Revoked <-chan string
	// Updater carries out ota_update; nil logs the command and skips it.
	Updater Updater
	// FirstHello, when set, is called once on the loop goroutine when the
	// first hello has succeeded (an updated binary confirms itself then).
	FirstHello func()
	// Supervisor, when set, hears the loop's state and its heartbeat: a
	// service manager (systemd, through sd_notify in nymph daemon) is told
	// ready, stopping and alive from it.
	Supervisor Supervisor
	// Payloads resolves payload_refs (hostio/payload); nil fails an exec
	// or run that has one. PayloadDir is where an exec's payload is
	// staged (payload.Stage); empty is [runtime] workdir's ".payloads",
	// which ExecOptions.DefaultWorkdir names.
	Payloads   PayloadFetcher
	PayloadDir string
	// SetLogLevel, when set, carries out the plane's live log level (a
	// wire.LogLevel's canonical name); nil logs and ignores it.
	SetLogLevel func(level wire.LogLevel)
	// DeliveryPath is where PersistDelivery is written (DeliveryFile in
	// the workdir); empty keeps nothing across a restart.
	DeliveryPath string
}

// PayloadFetcher turns a payload_ref into a read-only local file
// (*payload.Resolver).
type PayloadFetcher interface {
	Fetch(ctx context.Context, ref wire.PayloadRef) (path string, hit bool, err error)
}

// Supervisor is told, on the loop goroutine, how the daemon is doing.
// Its calls must not block: the loop waits for them.
type Supervisor interface {
	// State is called after every step with the machine's
	// Status().State (daemon.StatePolling, daemon.StateDraining, …),
	// changed or not.
	State(state string)
	// Alive is called every AliveEvery while the loop goroutine takes
	// events. It is called between steps, from the loop itself, so a
	// loop that is stuck stops calling it: that is what a watchdog
	// needs to see.
	Alive()
	// AliveEvery is how often Alive is called; 0 never calls it.
	AliveEvery() time.Duration
}

// KeyRotator replaces the host's key on the control plane and on disk
// (*signer.Transport with its key file), returning the new key's id.
type KeyRotator interface {
	RotateKey(ctx context.Context, workerID string) (string, error)
}

// Result is how the loop ended.
type Result struct {
	Code   int
	Reason string
}

// driver is the state of one Run.
type driver struct {
	opt   Options
	clock Clock
	log   *slog.Logger
	// events carries daemon.Events and the loop's own wrappers (pollDone,
	// runDone) from every goroutine to the loop.
	events chan any
	done   chan struct{}

	// withdraws is the transport's CanWithdraw: false leaves every poll
	// to finish.
	withdraws bool
	polls     map[uint64]context.CancelFunc
	// replaced is the poll last replaced on a wake and left to finish (0:
	// none). Only the latest is kept: a plane that does not answer an
	// overtaken poll would otherwise pile up one parked request per exec.
	replaced uint64
	timers   map[daemon.TimerID]armed

	// work is the parent of every exec, run and setup: CancelInFlight
	// cancels it. bg is the parent of posts and polls: Exit cancels it.
	work, bg             context.Context
	cancelWork, cancelBg context.CancelFunc

	setups chan daemon.StartSetup

	backoffUntil time.Time
	runOutcomes  map[string]uint64

	// inFlight holds each exec and run in flight, by kind and id: the
	// cancel of its own context under work, for a cancel command, and a
	// run's output (added by startRun, dropped once the run returned,
	// read by sendPoll).
	inFlight workInFlight

	// otaFiles holds the verified binary of each downloaded update until
	// the machine applies or discards it; helloSeen is true once
	// FirstHello was called.
	otaFiles  map[string]string
	helloSeen bool
	// heartbeat is the armed Supervisor.Alive timer, nil when none.
	heartbeat Timer
}

// Run drives the machine from Boot until it emits Exit, ctx ends (an
// immediate stop, code 1), and returns the exit code and reason.
func Run(ctx context.Context, opt Options) Result {
	d := newDriver(opt)
	defer d.stop()
	d.armHeartbeat()
	var ev daemon.Event = daemon.Boot{}
	for {
		for _, eff := range d.opt.Machine.Step(d.clock.Now(), ev) {
			if exit, ok := eff.(daemon.Exit); ok {
				d.publish()
				return Result{Code: exit.Code, Reason: exit.Reason}
			}
			d.do(eff)
		}
		d.publish()
		var stopped bool
		if ev, stopped = d.next(ctx); stopped {
			return Result{Code: 1, Reason: "stopped: " + context.Cause(ctx).Error()}
		}
	}
}

// next waits for the machine's next event; stopped is true when ctx ended
// first. Heartbeats are answered here, between steps, without one.
func (d *driver) next(ctx context.Context) (ev daemon.Event, stopped bool) {
	for {
		select {
		case x := <-d.events:
			if _, ok := x.(heartbeat); ok {
				d.opt.Supervisor.Alive()
				d.armHeartbeat()
				continue
			}
			return d.unwrap(x), false
		case s := <-d.opt.Signals:
			d.log.Info("signal received", "signal", string(s))
			return daemon.Signal{Kind: s}, false
		case msg := <-d.opt.Revoked:
			return daemon.KeyRevoked{Message: msg}, false
		case <-ctx.Done():
			return nil, true
		}
	}
}

// heartbeat is the loop's own event for Supervisor.Alive. Only one is
// armed or queued at a time: the next is armed when one is taken, so a
// stuck loop leaves a single one waiting.
type heartbeat struct{}

func (d *driver) armHeartbeat() {
	if d.opt.Supervisor == nil {
		return
	}
	if every := d.opt.Supervisor.AliveEvery(); every > 0 {
		d.heartbeat = d.clock.AfterFunc(every, func() { d.feed(heartbeat{}) })
	}
}

// unwrap does the loop's own bookkeeping for an event and returns what
// the machine is fed.
func (d *driver) unwrap(x any) daemon.Event {
	switch e := x.(type) {
	case pollDone:
		e.cancel()
		delete(d.polls, e.res.Seq)
		if d.replaced == e.res.Seq {
			d.replaced = 0
		}
		return e.res
	case runDone:
		d.runOutcomes[e.res.State]++
		return e.res
	case otaFetched:
		if e.ev.Err == nil {
			d.otaFiles[e.ev.CommandID] = e.tmp
		}
		return e.ev
	case daemon.TimerFired:
		d.timerFired(e)
		return e
	}
	return x.(daemon.Event)
}

func newDriver(opt Options) *driver {
	if opt.Clock == nil {
		opt.Clock = SystemClock{}
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Exec == nil {
		opt.Exec = shellexec.Run
	}
	d := &driver{
		opt:         opt,
		clock:       opt.Clock,
		log:         opt.Log,
		events:      make(chan any, 64),
		done:        make(chan struct{}),
		withdraws:   opt.Transport.CanWithdraw(),
		polls:       map[uint64]context.CancelFunc{},
		timers:      map[daemon.TimerID]armed{},
		setups:      make(chan daemon.StartSetup, 256),
		runOutcomes: map[string]uint64{},
		otaFiles:    map[string]string{},
	}
	d.work, d.cancelWork = context.WithCancel(context.Background())
	d.bg, d.cancelBg = context.WithCancel(context.Background())
	d.opt.ExecOptions.Poster = chunkPoster{d}
	if d.opt.ExecOptions.Logger == nil {
		d.opt.ExecOptions.Logger = opt.Log
	}
	go d.setupWorker()
	return d
}

// stop cancels whatever is still outstanding. It does not wait for
// children killed by the cancellation: an exit must not hang on them.
func (d *driver) stop() {
	close(d.done)
	for _, tmp := range d.otaFiles {
		os.Remove(tmp) // downloaded, never installed
	}
	if d.heartbeat != nil {
		d.heartbeat.Stop()
	}
	for _, a := range d.timers {
		a.t.Stop()
	}
	d.cancelBg()
	d.cancelWork()
}

// feedLater feeds ev from another goroutine: the loop itself must not
// wait on its own channel.
func (d *driver) feedLater(ev any) { go d.feed(ev) }

// feed hands an event to the loop; after the loop ended it is dropped.
func (d *driver) feed(ev any) {
	select {
	case d.events <- ev:
	case <-d.done:
	}
}

func (d *driver) publish() {
	if d.opt.Supervisor != nil {
		d.opt.Supervisor.State(d.opt.Machine.Status().State)
	}
	if d.opt.Board == nil {
		return
	}
	snap := introspect.Snapshot{Status: d.opt.Machine.Status(), Versions: d.opt.Versions,
		RunOutcomes: make(map[string]uint64, len(d.runOutcomes))}
	for k, v := range d.runOutcomes {
		snap.RunOutcomes[k] = v
	}
	if wait := d.backoffUntil.Sub(d.clock.Now()); wait > 0 {
		snap.BackoffS = wait.Seconds()
	}
	d.opt.Board.Publish(snap)
}

// do carries out one effect without blocking the loop.
func (d *driver) do(eff daemon.Effect) {
	switch e := eff.(type) {
	case daemon.SendHello:
		d.sendHello(e)
	case daemon.SendPoll:
		d.sendPoll(e)
	case daemon.CancelPoll:
		d.cancelPoll(e)
	case daemon.StartExec:
		d.startExec(e)
	case daemon.StartRun:
		d.startRun(e)
	case daemon.StartSetup:
		select {
		case d.setups <- e:
		default:
			go func() {
				select {
				case d.setups <- e:
				case <-d.done:
				}
			}()
		}
	case daemon.CancelInFlight:
		d.log.Warn("cancelling in-flight work")
		d.cancelWork()
	case daemon.SetLogLevel:
		if d.opt.SetLogLevel == nil {
			d.log.Warn("log level from the control plane ignored: not settable here", "level", e.Level)
		} else {
			d.opt.SetLogLevel(e.Level)
		}
	case daemon.PersistDelivery:
		d.persistDelivery(e)
	case daemon.CancelWork:
		d.cancelOne(e)
	case daemon.NotifyDraining:
		d.notifyDraining(e)
	case daemon.PostExecResult:
		d.postExecResult(e)
	case daemon.PostAck:
		d.postAck(e)
	case daemon.SetTimer:
		d.setTimer(e)
	case daemon.CancelTimer:
		if a, ok := d.timers[e.ID]; ok {
			a.t.Stop()
			delete(d.timers, e.ID)
		}
		if e.ID == daemon.TimerBackoff {
			d.backoffUntil = time.Time{}
		}
	case daemon.ReportState:
		d.log.Info("daemon state", "state", e.State)
		d.reportedState(e.State)
	case daemon.Log:
		d.log.LogAttrs(context.Background(), e.Level, e.Msg, e.Attrs...)
	case daemon.RefreshCapabilities:
		d.refresh(e)
	case daemon.StartOTA:
		d.startOTA(e)
	case daemon.ApplyOTA:
		d.applyOTA(e)
	case daemon.DiscardOTA:
		d.discardOTA(e)
	case daemon.RotateKey:
		d.rotateKey(e)
	default:
		d.log.Warn("unknown effect skipped", "effect", fmt.Sprintf("%T", eff))
	}
}

// rotateKey runs one rotation off the loop: it is a request to the
// control plane, and the machine needs no answer (a failed rotation
// leaves the old key, which the control plane still accepts).
func (d *driver) rotateKey(e daemon.RotateKey) {
	if d.opt.Keys == nil {
		d.log.Warn("rotate_key needs an identity ([identity] enabled, set by nymph daemon join); skipped", "command_id", e.CommandID)
		return
	}
	worker := d.opt.Machine.Status().WorkerID
	go func() {
		id, err := d.opt.Keys.RotateKey(d.bg, worker)
		if err != nil {
			d.log.Error("key rotation failed", "command_id", e.CommandID, "err", err)
			return
		}
		d.log.Info("key rotated", "command_id", e.CommandID, "key_id", id)
	}()
}

// cancelPoll cuts a poll off, unless the machine only replaced it on a
// wake: then the request is left to finish, because cutting it off could
// drop a reply that already carries commands (the plane answers an
// overtaken poll at once). A poll on a transport that cannot withdraw it
// is never cut off.
func (d *driver) cancelPoll(e daemon.CancelPoll) {
	cancel, ok := d.polls[e.Seq]
	if !ok || !d.withdraws {
		return
	}
	if !e.KeepReply {
		cancel()
		return
	}
	if older, ok := d.polls[d.replaced]; ok {
		older() // it has had a whole exec's time to bring its reply
	}
	d.replaced = e.Seq
}

// ---------------------------------------------------------------- timers

// armed is one armed timer and the deadline it was armed for.
type armed struct {
	t  Timer
	at time.Time
}

func (d *driver) setTimer(e daemon.SetTimer) {
	if a, ok := d.timers[e.ID]; ok {
		a.t.Stop()
	}
	if e.ID == daemon.TimerBackoff {
		d.backoffUntil = e.At
	}
	ev := daemon.TimerFired(e)
	d.timers[e.ID] = armed{t: d.clock.AfterFunc(e.At.Sub(d.clock.Now()), func() { d.feed(ev) }), at: e.At}
}

// timerFired forgets a timer that fired, unless it was re-armed since
// (then the fire is stale, and the machine recognises it by At).
func (d *driver) timerFired(t daemon.TimerFired) {
	if a, ok := d.timers[t.ID]; ok && a.at.Equal(t.At) {
		delete(d.timers, t.ID)
		if t.ID == daemon.TimerBackoff {
			d.backoffUntil = time.Time{}
		}
	}
}

// ---------------------------------------------------------------- requests

// roundTrip posts body and checks the status; a non-2xx is an error.
func (d *driver) post(ctx context.Context, lane transport.Lane, endpoint string, body []byte) error {
	req := &transport.Request{Endpoint: endpoint, Body: body, Lane: lane}
	resp, err := d.opt.Transport.RoundTrip(ctx, req)
	if err != nil {
		return err
	}
	return transport.Check(req, resp)
}

func (d *driver) sendHello(e daemon.SendHello) {
	body, err := e.Request.MarshalMsg(nil)
	if err != nil {
		d.feed(daemon.HelloResult{Err: fmt.Errorf("daemonloop: encode hello: %w", err)})
		return
	}
	d.log.Info("hello", "machine_id", e.Request.MachineID, "tags", e.Request.Tags, "runners", e.Request.Capabilities.Runners)
	go func() {
		req := &transport.Request{Endpoint: wire.PathHello, Body: body, Lane: transport.LaneControl}
		a := roundTripDecoded[wire.HelloResponse](d.bg, d.opt.Transport, req, "hello")
		d.feed(daemon.HelloResult{Status: a.status, Response: a.response, Body: a.body, Err: a.err, RetryAfter: a.retryAfter})
	}()
}

func (d *driver) sendPoll(e daemon.SendPoll) {
	req := e.Request
	req.Invocations = d.inFlight.fill(req.Invocations)
	body, err := req.MarshalMsg(nil)
	if err != nil {
		d.feed(daemon.PollResult{Seq: e.Seq, Err: fmt.Errorf("daemonloop: encode poll: %w", err)})
		return
	}
	ctx, cancel := context.WithCancel(d.bg)
	d.polls[e.Seq] = cancel
	go func() {
		req := &transport.Request{Endpoint: wire.PathPoll, Body: body, Lane: transport.LanePoll}
		a := roundTripDecoded[wire.PollResponse](ctx, d.opt.Transport, req, "poll")
		res := daemon.PollResult{Seq: e.Seq, Status: a.status, Response: a.response, Body: a.body, Err: a.err, RetryAfter: a.retryAfter}
		d.feed(pollDone{res: res, cancel: cancel})
	}()
}

// pollDone wraps a PollResult so the loop can forget the poll's cancel
// func before the machine sees the result.
type pollDone struct {
	res    daemon.PollResult
	cancel context.CancelFunc
}

func (d *driver) postExecResult(e daemon.PostExecResult) {
	body, err := e.Result.MarshalMsg(nil)
	if err != nil {
		d.feed(daemon.ResultPosted{ExecID: e.ExecID, Status: daemon.StatusUnsent, Err: fmt.Errorf("daemonloop: encode exec result: %w", err)})
		return
	}
	endpoint := wire.PathExecResult(e.ExecID)
	go func() {
		err := d.post(d.bg, transport.LaneControl, endpoint, body)
		d.feed(daemon.ResultPosted{ExecID: e.ExecID, Status: answeredStatus(err), Err: err})
	}()
}

func (d *driver) postAck(e daemon.PostAck) {
	body, err := e.Ack.MarshalMsg(nil)
	if err != nil {
		d.feed(daemon.AckPosted{InvocationID: e.Ack.InvocationID, Status: daemon.StatusUnsent, Err: fmt.Errorf("daemonloop: encode ack: %w", err)})
		return
	}
	go func() {
		err := d.post(d.bg, transport.LaneControl, wire.PathAck, body)
		d.feed(daemon.AckPosted{InvocationID: e.Ack.InvocationID, Status: answeredStatus(err), Err: err})
	}()
}

// answeredStatus is the status a failed post was answered with, 0 when
// no answer came (the core sends such a post again).
func answeredStatus(err error) int {
	if se, ok := errors.AsType[*transport.StatusError](err); ok {
		return se.Status
	}
	return 0
}

// answer is what a hello's or a poll's round trip tells the core: its
// status, and the decoded response of a 2xx or the body of another.
type answer[T any] struct {
	status     int
	response   *T
	body       []byte
	err        error
	retryAfter time.Duration
}

// roundTripDecoded sends req and decodes a 2xx response into a T; what
// names the response in a decoding error.
func roundTripDecoded[T any, PT interface {
	*T
	UnmarshalMsg([]byte) ([]byte, error)
}](ctx context.Context, tr transport.Transport, req *transport.Request, what string) answer[T] {
	resp, err := tr.RoundTrip(ctx, req)
	if err != nil {
		return answer[T]{err: err}
	}
	a := answer[T]{status: resp.Status, retryAfter: resp.RetryAfter}
	if !ok2xx(resp.Status) {
		a.body = resp.Body
		return a
	}
	var v T
	if _, err := PT(&v).UnmarshalMsg(resp.Body); err != nil {
		a.err = fmt.Errorf("daemonloop: decode %s response: %w", what, err)
	} else {
		a.response = &v
	}
	return a
}

func ok2xx(status int) bool { return status >= 200 && status <= 299 }

// chunkPoster posts a streaming exec's raw log bytes on the control lane.
type chunkPoster struct{ d *driver }

func (p chunkPoster) PostChunk(ctx context.Context, url string, data []byte) error {
	req := &transport.Request{Endpoint: url, ContentType: wire.ContentTypeOctets, Body: data, Lane: transport.LaneControl}
	resp, err := p.d.opt.Transport.RoundTrip(ctx, req)
	if err != nil {
		return err
	}
	return transport.Check(req, resp)
}

// ---------------------------------------------------------------- work

func (d *driver) startExec(e daemon.StartExec) {
	d.log.Debug("exec start", "exec_id", e.Exec.ExecID, "command_id", e.CommandID)
	ctx, _, done := d.inFlight.start(d.work, execKey(e.Exec.ExecID))
	go func() {
		ended := d.runExec(ctx, e.Exec)
		// Forgotten before the machine hears of the end: from then on it
		// may start the same exec_id again, under an entry of its own.
		done()
		d.feed(ended)
	}()
}

// runExec stages an exec's payload, runs the exec and unstages it; its end
// is what the machine is fed.
func (d *driver) runExec(ctx context.Context, exec wire.Exec) daemon.ExecFinished {
	ex, unstage, err := d.stageExecPayload(ctx, exec)
	if err != nil {
		// Spec 001: a payload that cannot be had (a sha256 mismatch
		// above all) ends the exec at -1 with no child spawned.
		d.log.Warn("exec refused: payload", "exec_id", ex.ExecID, "err", err)
		msg := err.Error()
		return daemon.ExecFinished{ExecID: ex.ExecID, Result: wire.ExecResult{ExitCode: wire.ExitSpawnFailed, Error: &msg}}
	}
	res := d.opt.Exec(ctx, ex, d.opt.ExecOptions)
	unstage() // before the machine hears of the end: nothing is left
	return daemon.ExecFinished{ExecID: ex.ExecID, Result: res}
}

// stageExecPayload puts an exec's payload (inline or by reference) in a
// file of its own and names it in the exec's environment (wire.EnvPayload);
// an exec without one is returned as it is.
func (d *driver) stageExecPayload(ctx context.Context, ex wire.Exec) (wire.Exec, func(), error) {
	if len(ex.PayloadInline) == 0 && ex.PayloadRef == nil {
		return ex, func() {}, nil
	}
	var cached string
	if ex.PayloadRef != nil {
		if len(ex.PayloadInline) > 0 {
			return ex, nil, fmt.Errorf("exec %s: %w: both payload_inline and payload_ref", ex.ExecID, wire.ErrPayloadInvalid)
		}
		if d.opt.Payloads == nil {
			return ex, nil, fmt.Errorf("exec %s: payload_ref: this daemon has no payload store configured", ex.ExecID)
		}
		path, hit, err := d.opt.Payloads.Fetch(ctx, *ex.PayloadRef)
		if err != nil {
			return ex, nil, fmt.Errorf("exec %s: %w", ex.ExecID, err)
		}
		d.log.Info("exec payload", "exec_id", ex.ExecID, "key", ex.PayloadRef.Key, "cache_hit", hit)
		cached = path
	}
	file, unstage, err := payload.Stage(d.payloadDir(), ex.ExecID, ex.PayloadInline, cached)
	if err != nil {
		return ex, nil, fmt.Errorf("exec %s: %w", ex.ExecID, err)
	}
	ex.Env = maps.Clone(ex.Env)
	if ex.Env == nil {
		ex.Env = map[string]string{}
	}
	ex.Env[wire.EnvPayload] = file
	return ex, unstage, nil
}

// payloadDir is where execs' payloads are staged.
func (d *driver) payloadDir() string {
	if d.opt.PayloadDir != "" {
		return d.opt.PayloadDir
	}
	root := d.opt.ExecOptions.DefaultWorkdir
	if root == "" {
		root = os.TempDir()
	}
	return filepath.Join(root, ".payloads")
}

func (d *driver) startRun(e daemon.StartRun) {
	log := d.log.With("invocation_id", e.Run.InvocationID, "runner", e.Kind)
	log.Info("run start")
	ctx, tail, done := d.inFlight.start(d.work, runKey(e.Run.InvocationID))
	go func() {
		var o runners.Outcome
		if d.opt.Runners == nil {
			o = runners.Outcome{State: wire.StateFailed, Error: &wire.ErrorInfo{
				TypeName: wire.ErrTypeRunnerUnavailable, Message: "no runners configured"}}
		} else {
			// The machine resolved the kind (default, alias): the run's
			// own run_config.runner is not read again.
			o = d.executeRun(ctx, e, tail, log)
		}
		log.Info("run end", "state", o.State)
		// Forgotten before the machine hears of the end: from then on it
		// may start the same invocation_id again, under an entry of its own.
		done()
		d.feed(runDone{res: daemon.RunFinished{InvocationID: e.Run.InvocationID, State: o.State,
			ResultBlob: o.ResultBlob, Error: o.Error}})
	}()
}

// executeRun resolves a run's payload_ref, when it has one, into the
// file its args.msgpack is copied from, and runs it; a payload that cannot
// be had fails the run (PayloadError) before any runner starts.
func (d *driver) executeRun(ctx context.Context, e daemon.StartRun, tail *runners.Tail, log *slog.Logger) runners.Outcome {
	x := runners.Execution{Kind: e.Kind, Run: e.Run, Dir: e.Run.InvocationID, Tail: tail}
	ref := e.Run.PayloadRef
	if ref == nil {
		return d.opt.Runners.Execute(ctx, x)
	}
	if d.opt.Payloads == nil {
		return runners.Failed(wire.ErrTypePayload, "payload_ref: this daemon has no payload store configured")
	}
	path, hit, err := d.opt.Payloads.Fetch(ctx, *ref)
	if err != nil {
		log.Warn("run refused: payload", "err", err)
		return runners.Failed(wire.ErrTypePayload, err.Error())
	}
	log.Info("run payload", "key", ref.Key, "cache_hit", hit)
	x.ArgsFile = path
	return d.opt.Runners.Execute(ctx, x)
}

// cancelOne stops the exec or run a CancelWork names; the runner stops it
// as at the end of a drain's grace (its process group signalled, docker
// stop, scancel, kubectl delete), and its end is reported as usual.
func (d *driver) cancelOne(e daemon.CancelWork) {
	key, log := runKey(e.InvocationID), d.log.With("invocation_id", e.InvocationID)
	if e.ExecID != "" {
		key, log = execKey(e.ExecID), d.log.With("exec_id", e.ExecID)
	}
	cancel := d.inFlight.cancelOf(key)
	if cancel == nil {
		log.Warn("cancel of work that already ended")
		return
	}
	log.Info("cancelling")
	cancel()
}

// notifyDraining tells the plane this daemon drains, on the control lane
// (the poll lane holds the parked poll), so it answers that poll now.
func (d *driver) notifyDraining(e daemon.NotifyDraining) {
	body, err := e.Request.MarshalMsg(nil)
	if err != nil {
		d.log.Warn("encode drain notice", "err", err)
		d.feedLater(daemon.DrainNoticed{})
		return
	}
	d.log.Info("telling the control plane this daemon drains")
	go func() {
		defer d.feed(daemon.DrainNoticed{})
		if err := d.post(d.bg, transport.LaneControl, wire.PathPoll, body); err != nil {
			d.log.Warn("drain notice not delivered; the parked poll ends at its deadline", "err", err)
			return
		}
		d.log.Debug("control plane told this daemon drains")
	}()
}

// runDone lets the loop count run outcomes before the machine sees them.
type runDone struct {
	res daemon.RunFinished
}

// setupWorker runs setups one after another, in the order they came.
func (d *driver) setupWorker() {
	for {
		select {
		case e := <-d.setups:
			d.feed(d.runSetup(e))
		case <-d.done:
			return
		}
	}
}

func (d *driver) runSetup(e daemon.StartSetup) daemon.SetupFinished {
	log := d.log.With("command_id", e.CommandID)
	log.Info("setup start", "workdir", e.Workdir)
	if d.opt.Runners == nil {
		return daemon.SetupFinished{CommandID: e.CommandID, Err: errors.New("no runners configured")}
	}
	// A setup always runs under the process runner, whatever the default.
	o := d.opt.Runners.ExecuteAs(d.work, runners.KindProcess, e.Run, filepath.Base(e.Workdir))
	res := setupResult(e.CommandID, o)
	log.Info("setup end", "state", o.State, "exit_code", res.ExitCode)
	return res
}

// setupResult turns a process-runner outcome into the exit status the
// machine reports.
func setupResult(commandID string, o runners.Outcome) daemon.SetupFinished {
	res := daemon.SetupFinished{CommandID: commandID}
	switch {
	case o.State == wire.StateSucceeded:
	case o.State == wire.StateKilled:
		res.Killed = true
		res.ExitCode = -1
	case o.ExitCode != nil && *o.ExitCode != 0:
		res.ExitCode = *o.ExitCode
	case o.Error != nil && o.Error.TypeName == wire.ErrTypeScriptFailed:
		// "signal: killed" and the like: not a normal exit, but the
		// script's own end, as a run's script failing is.
		res.ExitCode = -1
		res.Signal = o.Error.Message
	default:
		res.ExitCode = -1
		msg := "setup failed"
		if o.Error != nil {
			msg = o.Error.TypeName + ": " + o.Error.Message
		}
		res.Err = errors.New(msg)
	}
	return res
}

func (d *driver) refresh(e daemon.RefreshCapabilities) {
	go func() {
		if d.opt.Refresh == nil {
			d.feed(daemon.CapabilitiesRefreshed{CommandID: e.CommandID, Err: errors.New("capability refresh not configured")})
			return
		}
		caps, err := d.opt.Refresh(d.bg)
		d.feed(daemon.CapabilitiesRefreshed{CommandID: e.CommandID, Capabilities: caps, Err: err})
	}()
}
