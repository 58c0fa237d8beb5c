package daemon

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// ---------------------------------------------------------------- boot and hello

func (m *Machine) boot(now time.Time) {
	if m.booted {
		m.log(slog.LevelWarn, "second boot ignored")
		return
	}
	m.booted = true
	m.workerID = provisionalWorkerID(m.cfg.MachineID, m.cfg.Hostname, now, m.rnd)
	m.needHello = true
	m.sendHello()
}

func (m *Machine) sendHello() {
	m.helloInFlight = true
	m.counters.Hellos++
	m.setState(StateHello)
	m.emit(SendHello{Request: m.helloRequest()})
}

func (m *Machine) helloRequest() wire.HelloRequest {
	v := m.cfg.Versions
	if v.Protocol == nil {
		p := wire.ProtocolVersion
		v.Protocol = &p
	}
	if v.Daemon == nil && m.cfg.DaemonVersion != "" {
		d := m.cfg.DaemonVersion
		v.Daemon = &d
	}
	tags := m.cfg.Tags
	if tags == nil {
		tags = []string{} // a required field: an empty array, never nil
	}
	return wire.HelloRequest{
		MachineID:    resolveMachineID(m.cfg.MachineID, m.cfg.Hostname),
		Label:        m.cfg.Label,
		Tags:         tags,
		Lanes:        m.cfg.Lanes,
		Capabilities: m.capabilities(),
		Versions:     v,
		PublicKey:    m.cfg.PublicKey,
		Extensions:   m.cfg.Extensions,
		Cursor:       m.helloCursor(),
	}
}

// helloCursor is the cursor a hello names: the last one applied, when the
// daemon announces the cursor extension and has applied any.
func (m *Machine) helloCursor() *string {
	if m.cursor == 0 || !slices.Contains(m.cfg.Extensions, wire.ExtCursor) {
		return nil
	}
	return m.cursorWire
}

// setCursor moves the cursor and formats it as the wire carries it, once
// per value rather than on every poll; the string cursorWire points to
// is never changed, so a request may keep it.
func (m *Machine) setCursor(n uint64) {
	m.cursor, m.cursorWire = n, wire.FormatCursor(n)
}

// pollRequest is a poll of this worker, waiting at most waitS, reporting
// the runs in flight.
func (m *Machine) pollRequest(waitS float64) wire.PollRequest {
	req := wire.PollRequest{
		WorkerID:    m.workerID,
		Queue:       m.cfg.Queue,
		TimeoutS:    wire.Float(waitS),
		Invocations: make([]wire.InvocationStatus, 0, len(m.runs)),
	}
	if m.uses(wire.ExtCursor) {
		req.Cursor = m.cursorWire
	}
	for _, r := range m.runs {
		req.Invocations = append(req.Invocations, wire.InvocationStatus{
			InvocationID: r.id,
			State:        wire.StateRunning,
			StartedAt:    wire.TimestampOf(r.started),
		})
	}
	return req
}

// advanceCursor takes a reply's cursor once its commands are applied (a
// reply a hibernate cut short is not: the plane hands the rest out
// again), and has the driver keep it and the applied ids across a
// restart.
func (m *Machine) advanceCursor(cursor *string, all bool) {
	if !m.uses(wire.ExtCursor) {
		return
	}
	if n := wire.ParseCursor(cursor); all && n > m.cursor {
		m.setCursor(n)
		m.appliedDirty = true
	}
	if m.appliedDirty {
		m.appliedDirty = false
		m.emit(PersistDelivery{Cursor: m.cursor, Applied: m.applied.list()})
	}
}

// uses reports whether the plane agreed to extension ext.
func (m *Machine) uses(ext string) bool { return m.agreed.Has(ext) }

func (m *Machine) capabilities() wire.Capabilities {
	runners := m.cfg.Runners
	if runners == nil {
		runners = []string{}
	}
	return wire.Capabilities{
		Runners:        runners,
		MaxInvocations: wire.Int(m.cfg.MaxInvocations),
		Workdir:        m.cfg.Workdir,
	}
}

func (m *Machine) onHello(now time.Time, e HelloResult) {
	if !m.helloInFlight {
		m.log(slog.LevelDebug, "stale hello result ignored")
		return
	}
	m.helloInFlight = false
	if m.draining {
		m.checkDrained()
		return
	}
	switch {
	case e.Err != nil || e.Status == 0:
		m.helloFailed(now, "hello failed", errText(e.Err, e.Status))
	case is2xx(e.Status) && e.Response == nil:
		m.helloFailed(now, "hello failed", "2xx response without a body")
	case is2xx(e.Status):
		m.helloAccepted(now, e.Response)
	case e.Status == 422:
		m.exit(2, "hello refused: "+validationText(e.Body))
	case retryableStatus(e.Status):
		m.retryAfter = e.RetryAfter
		m.helloFailed(now, "hello failed", statusText(e.Status, e.Body))
	default:
		// Any other 4xx (bad bearer, wrong URL, a frame the relay refused)
		// will not heal by retrying the same request: say why and stop.
		m.exit(2, "hello refused: "+refusalText(e.Status, e.Body))
	}
}

func (m *Machine) helloAccepted(now time.Time, resp *wire.HelloResponse) {
	if r := resp.Reject; r != nil {
		m.exit(2, fmt.Sprintf("hello rejected: %s: %s", r.Code, r.Message))
		return
	}
	if resp.WorkerID != nil && *resp.WorkerID != "" {
		m.workerID = *resp.WorkerID
	}
	// Only what this daemon announced and the plane agreed to.
	var agreed []string
	for _, e := range wire.ConfigExtensionsOf(resp.Config) {
		if slices.Contains(m.cfg.Extensions, e) {
			agreed = append(agreed, e)
		}
	}
	m.agreed = wire.ExtSetOf(agreed)
	if len(agreed) > 0 {
		m.log(slog.LevelInfo, "extensions agreed with the control plane", slog.Any("extensions", agreed))
	}
	m.applyLiveConfig(now, resp.Config, true)
	m.needHello = false
	// The control plane answered: the outage that grew the backoff is
	// over, so the first poll error after it waits retry_min_s again.
	m.backoff.reset()
	m.setState(StatePolling)
	m.pollIfReady(now)
}

func (m *Machine) helloFailed(now time.Time, msg, why string) {
	m.counters.HelloErrors++
	m.log(slog.LevelWarn, msg, slog.String("error", why))
	m.scheduleRetry(now)
}

// ---------------------------------------------------------------- the poll loop

// pollIfReady sends a poll when the loop is running, none is parked, and a
// permit is free: with every permit taken the daemon stops long-polling so
// it never claims work it cannot start.
func (m *Machine) pollIfReady(now time.Time) {
	if m.state != StatePolling || m.parked != 0 {
		return
	}
	// With every permit taken the daemon claims no work; with the cancel
	// extension it still listens, for control commands only.
	full := !m.permitFree()
	if full && !m.uses(wire.ExtCancel) {
		return
	}
	m.pollSeq++
	m.parked = m.pollSeq
	req := m.pollRequest(m.cfg.WaitMaxS)
	req.Full = full
	if m.pendingCaps != nil {
		if m.uses(wire.ExtConfig) {
			req.CapabilitiesGen = m.capsGen
		}
		caps := *m.pendingCaps
		req.UpdatedCapabilities = &caps
		if m.capsFirstSeq == 0 {
			m.capsFirstSeq = m.pollSeq
		}
	}
	m.counters.Polls++
	m.lastPollAt = now
	m.emit(SendPoll{Seq: m.pollSeq, Request: req})
}

// wake is the internal wake signal: a finished exec or setup cancels the
// parked poll and sends a fresh one at once, so back-to-back execs flow at
// completion speed instead of waiting out wait_max_s. Under
// KeepPollOnWake the parked poll stays: the control plane answers it on
// the exec result or ack, and onPoll polls again after that reply.
func (m *Machine) wake(now time.Time) {
	if m.state != StatePolling {
		return
	}
	if m.parked != 0 {
		if m.cfg.KeepPollOnWake {
			return
		}
		m.emit(CancelPoll{Seq: m.parked, KeepReply: true})
		m.parked = 0
	}
	m.pollIfReady(now)
}

func (m *Machine) onPoll(now time.Time, e PollResult) {
	current := e.Seq != 0 && e.Seq == m.parked
	if current {
		m.parked = 0
	}
	// A drain under KeepPollOnWake waits for the parked poll's reply.
	defer m.checkDrained()
	ok := e.Err == nil && is2xx(e.Status) && e.Response != nil
	if !ok {
		if current {
			m.pollFailed(now, e)
		}
		return
	}
	m.lastPollOKAt = now
	m.backoff.reset()
	if m.capsFirstSeq != 0 && e.Seq >= m.capsFirstSeq {
		m.pendingCaps, m.capsFirstSeq = nil, 0
	}
	if len(e.Response.Commands) > 0 {
		m.stopIdle()
	}
	m.applyLiveConfig(now, e.Response.Config, false)
	all := m.runCommands(now, e.Response.Commands)
	m.advanceCursor(e.Response.Cursor, all)
	if !current {
		return
	}
	if len(e.Response.Commands) == 0 {
		m.startIdle(now)
	}
	m.pollIfReady(now)
}

func (m *Machine) pollFailed(now time.Time, e PollResult) {
	m.counters.PollErrors++
	m.retryAfter = e.RetryAfter
	if e.Status == 404 && isUnknownWorker(e.Body) {
		// The control plane forgot this worker (restart, expiry): say
		// hello again after the usual wait, so a confused server cannot
		// turn this into a tight hello/poll loop.
		m.needHello = true
		m.log(slog.LevelWarn, "control plane does not know this worker; saying hello again", slog.String("worker_id", m.workerID))
	} else {
		// The body's {error, message} says why (a signature refused for
		// the host's clock, say), so the log does not leave it to guess.
		why := errText(e.Err, e.Status)
		if e.Err == nil && e.Status != 0 {
			why = statusText(e.Status, e.Body)
		}
		m.log(slog.LevelWarn, "poll failed", slog.String("error", why))
	}
	if m.state == StatePolling {
		m.scheduleRetry(now)
	}
}

// scheduleRetry waits out the next backoff step before a hello or poll,
// or the plane's Retry-After when that is longer.
func (m *Machine) scheduleRetry(now time.Time) {
	wait := m.backoff.next(m.rnd.Float64())
	if ra := min(m.retryAfter, MaxRetryAfter); ra > wait {
		wait = ra
	}
	m.retryAfter = 0
	m.setState(StateBackoff)
	m.setTimer(TimerBackoff, now.Add(wait))
}
