package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// ---------------------------------------------------------------- commands

// runCommands handles one poll response's commands in array order. A
// hibernate returns from the loop: the commands after it are discarded.
//
// Under a cursor (wire.ExtCursor) a command whose id was applied already
// (handed out again: the plane had not seen this daemon's cursor reach
// it) is skipped, so nothing runs twice. It reports whether every command
// was handled, none discarded.
func (m *Machine) runCommands(now time.Time, cmds []wire.Command) (all bool) {
	dedupe := m.uses(wire.ExtCursor)
	for i, c := range cmds {
		m.counters.Commands++
		if dedupe {
			if m.applied.has(c.ID) {
				m.log(slog.LevelDebug, "command applied already; skipped", slog.String("command_id", c.ID), slog.String("kind", c.Kind))
				continue
			}
			m.applied.add(c.ID)
			m.appliedDirty = true
		}
		d := wire.Dispatch(c)
		if h, ok := d.(wire.HibernateCommand); ok {
			if rest := len(cmds) - i - 1; rest > 0 {
				m.counters.Skipped += uint64(rest)
				m.log(slog.LevelInfo, "hibernate discards the rest of the poll response",
					slog.String("command_id", h.ID), slog.Int("discarded", rest))
			}
			m.hibernate(now, h)
			return i == len(cmds)-1
		}
		m.runCommand(now, d)
	}
	return true
}

func (m *Machine) runCommand(now time.Time, d wire.Directive) {
	switch c := d.(type) {
	case wire.SetupCommand:
		m.queueSetup(now, c)
	case wire.ExecCommand:
		m.acceptExec(now, c)
	case wire.OTAUpdateCommand:
		m.otaUpdate(c)
	case wire.ResetBackoffCommand:
		m.backoff.reset()
	case wire.RotateKeyCommand:
		if m.draining {
			m.skip(c.ID, c.CommandKind(), "daemon is draining")
			return
		}
		m.emit(RotateKey{CommandID: c.ID})
	case wire.RunCommand:
		m.acceptRun(now, c)
	case wire.CancelCommand:
		m.cancelOne(now, c)
	case wire.Unknown:
		m.skip(c.ID, c.Kind, c.Reason)
	default:
		m.skip(d.CommandID(), d.CommandKind(), "no handler")
	}
}

func (m *Machine) skip(id, kind, reason string) {
	m.counters.Skipped++
	m.log(slog.LevelWarn, "command skipped",
		slog.String("command_id", id), slog.String("kind", kind), slog.String("reason", reason))
}

func (m *Machine) acceptExec(now time.Time, c wire.ExecCommand) {
	id := c.Body.ExecID
	if m.execKnown(id) {
		// Without the cursor extension a reconnect can redeliver a command.
		m.skip(c.ID, c.CommandKind(), "exec "+id+" is already running or held")
		return
	}
	if m.refusesWork() {
		m.answerExecUnstarted(id, ShutdownMessage)
		return
	}
	exec := c.Body
	if len(m.held) > 0 || !m.permitFree() {
		m.held = append(m.held, heldWork{commandID: c.ID, isExec: true, exec: exec})
		return
	}
	m.startExec(c.ID, exec)
}

func (m *Machine) startExec(commandID string, exec wire.Exec) {
	m.execs = append(m.execs, execEntry{id: exec.ExecID})
	m.counters.ExecsStarted++
	m.emit(StartExec{CommandID: commandID, Exec: exec})
	m.stopPollingIfFull()
}

// stopPollingIfFull withdraws a parked poll once the last permit is taken
// (possible only when a cancelled poll's late response brought work): the
// daemon must not claim work it cannot start.
// Under KeepPollOnWake the poll is never abandoned (and no poll is parked
// while a reply's work is taken, so the case does not arise).
func (m *Machine) stopPollingIfFull() {
	if m.parked != 0 && !m.permitFree() && !m.cfg.KeepPollOnWake {
		m.emit(CancelPoll{Seq: m.parked})
		m.parked = 0
	}
}

func (m *Machine) acceptRun(now time.Time, c wire.RunCommand) {
	run := c.Body
	id := run.InvocationID
	if m.runKnown(id) {
		m.skip(c.ID, c.CommandKind(), "run "+id+" is already running or held")
		return
	}
	if m.refusesWork() {
		m.ack(id, wire.StateKilled, nil, &wire.ErrorInfo{TypeName: wire.ErrTypeCancelled, Message: ShutdownMessage})
		return
	}
	kind, failure := m.resolveRunner(run.RunConfig.Runner)
	if failure != nil {
		m.ack(id, wire.StateFailed, nil, failure)
		return
	}
	if len(m.held) > 0 || !m.permitFree() {
		m.held = append(m.held, heldWork{commandID: c.ID, run: run, kind: kind})
		return
	}
	m.startRun(now, c.ID, kind, run)
}

func (m *Machine) startRun(now time.Time, commandID, kind string, run wire.Run) {
	m.runs = append(m.runs, runEntry{id: run.InvocationID, started: now})
	m.counters.RunsStarted++
	m.emit(StartRun{CommandID: commandID, Kind: kind, Run: run})
	m.stopPollingIfFull()
}

// resolveRunner picks the runner kind of a run: run_config.runner, else
// [runtime] default_runner, an alias resolved — never a fallback for a
// name that is no kind. Mock is a kind only in a build that offers it:
// elsewhere it is as unknown as any other name (spec 003: it "exists only
// under the test-mock-runner cargo feature").
func (m *Machine) resolveRunner(asked string) (string, *wire.ErrorInfo) {
	name := asked
	if name == "" {
		name = m.cfg.DefaultRunner
	}
	kind, ok := wire.RunnerKind(name)
	if !ok || kind == wire.RunnerMock && !m.offers(kind) {
		return "", &wire.ErrorInfo{TypeName: wire.ErrTypeDaemon, Message: "unknown runner kind: " + name}
	}
	if !m.offers(kind) {
		return "", &wire.ErrorInfo{TypeName: wire.ErrTypeRunnerUnavailable,
			Message: fmt.Sprintf("runner %s is not offered by this daemon (runners: %v)", kind, m.cfg.Runners)}
	}
	return kind, nil
}

// offers reports whether Config.Runners offers kind, under its name or an
// alias.
func (m *Machine) offers(kind string) bool {
	return slices.ContainsFunc(m.cfg.Runners, func(offered string) bool {
		k, _ := wire.RunnerKind(offered)
		return k == kind
	})
}

// otaUpdate asks for the download of an update wire.CheckOTA passes, one
// at a time; a draining daemon takes none. A refused one is skipped here,
// so the updater is never asked for what it would refuse.
func (m *Machine) otaUpdate(c wire.OTAUpdateCommand) {
	u := c.Body
	refused := wire.CheckOTA(u, m.cfg.DaemonVersion)
	switch {
	case m.draining:
		m.skip(c.ID, c.CommandKind(), "daemon is draining")
	case errors.Is(refused, wire.ErrOTASameVersion):
		m.log(slog.LevelInfo, "ota_update to the running version: nothing to do",
			slog.String("command_id", c.ID), slog.String("version", u.Version))
	case refused != nil:
		m.skip(c.ID, c.CommandKind(), refused.Error())
	case m.fetchingOTA != "":
		m.skip(c.ID, c.CommandKind(), "another update is downloading")
	default:
		m.fetchingOTA = c.ID
		m.emit(StartOTA{CommandID: c.ID, Update: u})
	}
}

// cancelOne stops the run or exec a cancel names: running, it is stopped
// (CancelWork) and reported killed with the reason when it ends; held for
// a permit, it is answered at once without running; unknown (finished
// already, or never here), the cancel is logged and skipped.
func (m *Machine) cancelOne(now time.Time, c wire.CancelCommand) {
	id, isExec := c.Body.InvocationID, false
	if id == "" {
		id, isExec = c.Body.ExecID, true
	}
	reason := c.Body.Reason
	if reason == "" {
		reason = "cancelled by the control plane"
	}
	if i := slices.IndexFunc(m.held, func(h heldWork) bool {
		return h.isExec == isExec && (isExec && h.exec.ExecID == id || !isExec && h.run.InvocationID == id)
	}); i >= 0 {
		m.held = slices.Delete(m.held, i, i+1)
		m.log(slog.LevelInfo, "cancelled before it started", slog.String("command_id", c.ID), slog.String("id", id), slog.String("reason", reason))
		if isExec {
			m.answerExecUnstarted(id, "cancelled: "+reason)
		} else {
			m.ack(id, wire.StateKilled, nil, &wire.ErrorInfo{TypeName: wire.ErrTypeCancelled, Message: reason})
		}
		m.checkDrained()
		return
	}
	running := isExec && m.execRunning(id) || !isExec && m.runRunning(id)
	if !running {
		m.skip(c.ID, c.CommandKind(), "no running or held "+map[bool]string{true: "exec", false: "run"}[isExec]+" "+id)
		return
	}
	if m.cancelReasons == nil {
		m.cancelReasons = map[string]string{}
	}
	m.cancelReasons[id] = reason
	m.log(slog.LevelInfo, "cancelling", slog.String("command_id", c.ID), slog.String("id", id), slog.String("reason", reason))
	if isExec {
		m.emit(CancelWork{ExecID: id})
	} else {
		m.emit(CancelWork{InvocationID: id})
	}
}

// cancelReason takes the reason a cancel gave for id, if one was sent.
func (m *Machine) cancelReason(id string) (string, bool) {
	r, ok := m.cancelReasons[id]
	delete(m.cancelReasons, id)
	return r, ok
}

// refusesWork: work that arrives now is answered unstarted. A drain for a
// stop refuses it; a drain for an update takes it (only the reply of the
// poll already in flight can bring any), and installs once it is done.
func (m *Machine) refusesWork() bool { return m.draining && m.updating == "" }

// onOTAFetched starts the update's drain once its binary is verified: no
// new work is taken, what runs finishes within grace_s (or is cancelled
// and reported killed, as at shutdown), every outcome is posted, and only
// then is the binary installed and executed — so an update loses nothing.
func (m *Machine) onOTAFetched(now time.Time, e OTAFetched) {
	if e.CommandID != m.fetchingOTA {
		return
	}
	m.fetchingOTA = ""
	switch {
	case e.Err != nil:
		m.log(slog.LevelError, "ota_update failed; the running binary stays",
			slog.String("command_id", e.CommandID), slog.String("version", e.Version), slog.String("err", e.Err.Error()))
	case m.draining:
		m.log(slog.LevelInfo, "ota_update downloaded while draining: not installed",
			slog.String("command_id", e.CommandID), slog.String("version", e.Version))
		m.emit(DiscardOTA{CommandID: e.CommandID})
	default:
		m.updating, m.updateVersion = e.CommandID, e.Version
		m.drain(now, "update to "+e.Version)
	}
}

// onOTAApplied resumes polling after an install or exec that failed: the
// drain is undone, the running binary keeps working.
func (m *Machine) onOTAApplied(now time.Time, e OTAApplied) {
	if e.CommandID != m.updating {
		return
	}
	msg := "ota_update could not be applied; the running binary stays and polls again"
	if e.Err != nil {
		m.log(slog.LevelError, msg, slog.String("command_id", e.CommandID), slog.String("err", e.Err.Error()))
	}
	m.updating, m.updateVersion, m.applying = "", "", false
	m.draining, m.cancelled, m.drainReason = false, false, ""
	m.setState(StatePolling)
	m.pollIfReady(now)
	m.startIdle(now)
}

// ---------------------------------------------------------------- hibernate

func (m *Machine) hibernate(now time.Time, h wire.HibernateCommand) {
	if m.draining {
		m.skip(h.ID, h.CommandKind(), "daemon is draining")
		return
	}
	until := wire.EpochTime(float64(h.Body.UntilEpochS))
	m.hibernateTill = until
	m.stopIdle()
	m.cancelTimer(TimerBackoff)
	if m.parked != 0 {
		// Only when this response raced a wake: the fresh poll goes too.
		m.emit(CancelPoll{Seq: m.parked})
		m.parked = 0
	}
	m.setState(StateHibernating)
	if !until.After(now) {
		m.resume(now)
		return
	}
	m.setTimer(TimerHibernate, until)
}

// resume starts a fresh poll loop after a hibernate: no new hello, the
// backoff from scratch.
func (m *Machine) resume(now time.Time) {
	m.hibernateTill = time.Time{}
	m.backoff.reset()
	m.setState(StatePolling)
	m.pollIfReady(now)
}

// ---------------------------------------------------------------- setup

func (m *Machine) queueSetup(now time.Time, c wire.SetupCommand) {
	if m.refusesWork() {
		m.ack(wire.SetupInvocationID(c.ID), wire.StateKilled, nil,
			&wire.ErrorInfo{TypeName: wire.ErrTypeCancelled, Message: ShutdownMessage})
		return
	}
	m.setups = append(m.setups, c)
	m.startNextSetup()
}

// startNextSetup runs the serial setup queue: one at a time, without a
// permit, never blocking the poll loop.
func (m *Machine) startNextSetup() {
	if m.setup != nil || len(m.setups) == 0 || m.cancelled {
		return
	}
	c := m.setups[0]
	m.setups = slices.Delete(m.setups, 0, 1)
	m.setup = &c
	m.emit(StartSetup{CommandID: c.ID, Run: m.setupRun(c), Workdir: m.setupWorkdir(c.ID)})
}

// setupRun is the synthetic invocation a setup runs as.
func (m *Machine) setupRun(c wire.SetupCommand) wire.Run {
	qualname := "setup"
	if c.Body.Name != nil && *c.Body.Name != "" {
		qualname = *c.Body.Name
	}
	script := c.Body.Script
	run := wire.Run{
		InvocationID: wire.SetupInvocationID(c.ID),
		Function:     wire.Function{Module: "_setup", Qualname: qualname},
		RunConfig:    wire.RunConfig{Runner: wire.RunnerProcess},
		Script:       &script,
	}
	if c.Body.Sudo {
		root := "root"
		run.AsUser = &root
	}
	return run
}

func (m *Machine) setupWorkdir(commandID string) string {
	dir := m.cfg.Workdir
	if dir != "" && dir[len(dir)-1] != '/' {
		dir += "/"
	}
	return dir + "_setup-" + commandID
}

func (m *Machine) onSetupFinished(now time.Time, e SetupFinished) {
	if m.setup == nil || m.setup.ID != e.CommandID || m.refreshing {
		m.log(slog.LevelWarn, "finish of an unknown setup ignored", slog.String("command_id", e.CommandID))
		return
	}
	m.counters.Setups++
	c := m.setup
	id := wire.SetupInvocationID(c.ID)
	switch {
	case e.Killed:
		m.ack(id, wire.StateKilled, nil, cancelledError())
	case e.Signal != "":
		m.ack(id, wire.StateFailed, nil, &wire.ErrorInfo{TypeName: wire.ErrTypeScriptFailed, Message: e.Signal})
	case e.Err != nil:
		m.ack(id, wire.StateFailed, nil, &wire.ErrorInfo{TypeName: wire.ErrTypeDaemon, Message: e.Err.Error()})
	case e.ExitCode != 0:
		m.ack(id, wire.StateFailed, nil, &wire.ErrorInfo{TypeName: wire.ErrTypeScriptFailed, Message: fmt.Sprintf("exit status %d", e.ExitCode)})
	default:
		refresh := c.Body.RefreshCapabilities && !m.draining
		if !refresh || !m.cfg.KeepPollOnWake {
			m.ack(id, wire.StateSucceeded, nil, nil)
		}
		if refresh {
			// The slot stays busy until detection is back, so the next
			// setup never runs beside a half-finished probe. Under
			// KeepPollOnWake the ack waits too: it is what makes the
			// control plane answer the parked poll, and the poll after
			// that reply must carry updated_capabilities.
			m.refreshing = true
			m.emit(RefreshCapabilities{CommandID: c.ID})
			return
		}
	}
	m.setupDone(now)
}

func (m *Machine) onCapabilities(now time.Time, e CapabilitiesRefreshed) {
	if !m.refreshing || m.setup == nil || m.setup.ID != e.CommandID {
		m.log(slog.LevelWarn, "capabilities for an unknown setup ignored", slog.String("command_id", e.CommandID))
		return
	}
	m.refreshing = false
	if e.Err != nil {
		m.log(slog.LevelWarn, "capability refresh failed", slog.String("command_id", e.CommandID), slog.String("error", e.Err.Error()))
	} else {
		caps := e.Capabilities
		caps.Runners = slices.Clone(caps.Runners)
		m.pendingCaps, m.capsFirstSeq = &caps, 0
		m.capsGen++
		// What the host now offers decides which runs it accepts.
		m.cfg.Runners = caps.Runners
	}
	if m.cfg.KeepPollOnWake {
		m.ack(wire.SetupInvocationID(e.CommandID), wire.StateSucceeded, nil, nil)
	}
	m.setupDone(now)
}

// setupDone frees the setup slot; a setup's end wakes the poll loop so
// updated_capabilities ships at once.
func (m *Machine) setupDone(now time.Time) {
	m.setup = nil
	m.stopIdle()
	m.startNextSetup()
	m.wake(now)
	m.checkDrained()
}
