package daemon

import (
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// ---------------------------------------------------------------- completions

func (m *Machine) onExecFinished(now time.Time, e ExecFinished) {
	if !removeFinished(m, &m.execs, "exec", "exec_id", e.ExecID) {
		return
	}
	res := e.Result
	if reason, ok := m.cancelReason(e.ExecID); ok && res.ExitCode == wire.ExitSpawnFailed {
		msg := "cancelled: " + reason
		res.Error = &msg
	}
	m.countExec(int64(res.ExitCode))
	m.postExecResult(e.ExecID, res)
	m.released(now)
	m.wake(now)
	m.checkDrained()
}

// removeFinished takes the exec or run a finish names (idAttr: id) out of
// entries; the finish of one the machine does not hold is logged and
// ignored, and reports false.
func removeFinished[E interface{ entryID() string }](m *Machine, entries *[]E, what, idAttr, id string) bool {
	i := slices.IndexFunc(*entries, func(x E) bool { return x.entryID() == id })
	if i < 0 {
		m.log(slog.LevelWarn, "finish of an unknown "+what+" ignored", slog.String(idAttr, id))
		return false
	}
	*entries = slices.Delete(*entries, i, i+1)
	return true
}

func (m *Machine) countExec(code int64) {
	switch {
	case code == 0:
		m.counters.ExecsOK++
	case code == wire.ExitTimeout:
		m.counters.ExecsTimedOut++
	case code < 0:
		m.counters.ExecsFailed++
	default:
		m.counters.ExecsNonZero++
	}
}

func (m *Machine) onRunFinished(now time.Time, e RunFinished) {
	if !removeFinished(m, &m.runs, "run", "invocation_id", e.InvocationID) {
		return
	}
	m.counters.RunsDone++
	state, blob, errInfo := e.State, e.ResultBlob, e.Error
	reason, cancelledOne := m.cancelReason(e.InvocationID)
	switch state {
	case wire.StateSucceeded:
		errInfo = nil
	case wire.StateKilled:
		switch {
		case cancelledOne:
			errInfo = &wire.ErrorInfo{TypeName: wire.ErrTypeCancelled, Message: reason}
		case m.cancelled:
			errInfo = cancelledError()
		}
		blob = nil
	case wire.StateFailed:
		blob = nil
	default:
		m.log(slog.LevelWarn, "run finished in an unknown state; acked as failed",
			slog.String("invocation_id", e.InvocationID), slog.String("state", state))
		state, blob = wire.StateFailed, nil
		if errInfo == nil {
			errInfo = &wire.ErrorInfo{TypeName: wire.ErrTypeDaemon, Message: "runner reported state " + strconv.Quote(e.State)}
		}
	}
	m.ack(e.InvocationID, state, blob, errInfo)
	m.released(now)
	// Only an exec's end wakes a parked poll; a run's end sends a poll
	// only if the loop had stopped for want of a permit.
	m.pollIfReady(now)
	m.checkDrained()
}

// released starts held work now that a permit is free. A completing
// invocation also restarts the idle clock.
func (m *Machine) released(now time.Time) {
	m.stopIdle()
	for len(m.held) > 0 && m.permitFree() && !m.cancelled {
		h := m.held[0]
		m.held = slices.Delete(m.held, 0, 1)
		if h.isExec {
			m.startExec(h.commandID, h.exec)
		} else {
			m.startRun(now, h.commandID, h.kind, h.run)
		}
	}
}

// answerExecUnstarted posts the result of an exec that never ran: exit
// code -1 is the spec's "cancellation at shutdown".
func (m *Machine) answerExecUnstarted(execID, why string) {
	m.countExec(wire.ExitSpawnFailed)
	m.postExecResult(execID, wire.ExecResult{ExitCode: wire.ExitSpawnFailed, Error: &why})
}

func cancelledError() *wire.ErrorInfo {
	return &wire.ErrorInfo{TypeName: wire.ErrTypeCancelled, Message: wire.CancelledMessage}
}

// ---------------------------------------------------------------- idle policy

// startIdle runs when a poll returned no commands: the idle clock starts
// only if nothing is in flight either, and keeps running across further
// empty polls.
func (m *Machine) startIdle(now time.Time) {
	if m.cfg.KeepAliveS < 0 || !m.idleSince.IsZero() || m.busy() || m.draining {
		return
	}
	m.idleSince = now
	if m.cfg.KeepAliveS == 0 {
		m.drain(now, "idle (keep_alive_s = 0)")
		return
	}
	m.setTimer(TimerIdle, now.Add(seconds(m.cfg.KeepAliveS)))
}

func (m *Machine) stopIdle() {
	m.idleSince = time.Time{}
	m.cancelTimer(TimerIdle)
}

// busy: anything started, held or queued.
func (m *Machine) busy() bool {
	return len(m.execs) > 0 || len(m.runs) > 0 || len(m.held) > 0 || len(m.setups) > 0 || m.setup != nil
}
