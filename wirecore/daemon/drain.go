package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// ---------------------------------------------------------------- timers

func (m *Machine) setTimer(id TimerID, at time.Time) {
	m.timers[TimerIndex(id)] = at
	m.emit(SetTimer{ID: id, At: at})
}

func (m *Machine) cancelTimer(id TimerID) {
	i := TimerIndex(id)
	if m.timers[i].IsZero() {
		return
	}
	m.timers[i] = time.Time{}
	m.emit(CancelTimer{ID: id})
}

func (m *Machine) onTimer(now time.Time, e TimerFired) {
	i := TimerIndex(e.ID)
	if m.timers[i].IsZero() || !m.timers[i].Equal(e.At) {
		return // cancelled or re-armed since: stale
	}
	m.timers[i] = time.Time{}
	switch e.ID {
	case TimerBackoff:
		if m.needHello {
			m.sendHello()
			return
		}
		m.setState(StatePolling)
		m.pollIfReady(now)
	case TimerIdle:
		m.drain(now, fmt.Sprintf("idle for keep_alive_s = %g", m.cfg.KeepAliveS))
	case TimerGrace:
		m.cancelInFlight(now, "shutdown grace expired")
	case TimerHibernate:
		m.resume(now)
	case TimerRepost:
		m.onRepost(now)
	}
}

// ---------------------------------------------------------------- drain

func (m *Machine) onSignal(now time.Time, e Signal) {
	m.signals++
	if m.updating != "" {
		// A stop asked for during an update's drain is a stop: the
		// daemon exits and the update is dropped.
		m.log(slog.LevelInfo, "update dropped: the daemon is stopping", slog.String("version", m.updateVersion))
		m.emit(DiscardOTA{CommandID: m.updating})
		m.updating, m.updateVersion, m.applying = "", "", false
		m.drainReason = "signal " + string(e.Kind)
		m.setState(StateDraining)
	}
	switch m.signals {
	case 1:
		m.drain(now, "signal "+string(e.Kind))
	case 2:
		m.drain(now, "signal "+string(e.Kind)) // no-op when already draining
		m.cancelInFlight(now, "second signal")
	default:
		m.exit(1, "third signal: exiting without waiting for in-flight work")
	}
}

// drain is the graceful path shared by signals and the idle policy: stop
// polling, let in-flight work finish within grace_s, post every outcome,
// exit 0.
func (m *Machine) drain(now time.Time, reason string) {
	if m.draining {
		return
	}
	m.draining = true
	m.drainReason = reason
	m.log(slog.LevelInfo, "draining", slog.String("reason", reason))
	switch {
	case m.parked != 0 && !m.cfg.KeepPollOnWake:
		m.emit(CancelPoll{Seq: m.parked})
		m.parked = 0
	case m.parked != 0 && m.uses(wire.ExtDrain):
		// The parked poll cannot be withdrawn (a relay carries it): ask
		// the plane to answer it now rather than at wait_max_s.
		req := m.pollRequest(0)
		req.Draining = true
		m.noticing = true
		m.emit(NotifyDraining{Request: req})
	}
	m.cancelTimer(TimerBackoff)
	m.cancelTimer(TimerIdle)
	m.cancelTimer(TimerHibernate)
	m.hibernateTill = time.Time{}
	if m.updating != "" {
		m.setState(StateUpdating)
	} else {
		m.setState(StateDraining)
	}
	if m.busy() || m.parked != 0 || m.repostsWaiting() {
		m.setTimer(TimerGrace, now.Add(seconds(max(m.cfg.GraceS, 0))))
	}
	m.checkDrained()
}

// cancelInFlight is the second cancellation: what still runs is killed
// (and reports its end), what never started is answered without running.
func (m *Machine) cancelInFlight(now time.Time, reason string) {
	if m.cancelled {
		return
	}
	m.cancelled = true
	m.cancelTimer(TimerGrace)
	if len(m.execs) > 0 || len(m.runs) > 0 || (m.setup != nil && !m.refreshing) {
		m.log(slog.LevelWarn, "cancelling in-flight work", slog.String("reason", reason))
		m.emit(CancelInFlight{})
	}
	for _, h := range m.held {
		if h.isExec {
			m.answerExecUnstarted(h.exec.ExecID, wire.CancelledMessage)
		} else {
			m.ack(h.run.InvocationID, wire.StateKilled, nil, cancelledError())
		}
	}
	m.held = m.held[:0]
	for _, c := range m.setups {
		m.ack(wire.SetupInvocationID(c.ID), wire.StateKilled, nil, cancelledError())
	}
	m.setups = m.setups[:0]
	m.giveUpReposts()
	if m.parked != 0 {
		// Under KeepPollOnWake the drain waited for this poll's reply;
		// now it stops waiting. Commands in a reply that still arrives
		// are lost if the daemon has exited by then.
		m.log(slog.LevelWarn, "withdrawing the poll in flight", slog.String("reason", reason))
		m.emit(CancelPoll{Seq: m.parked})
		m.parked = 0
	}
	m.checkDrained()
}

// checkDrained exits once a drain has nothing left: nothing running, held
// or queued, every outcome posted, and no poll in flight (only under
// KeepPollOnWake does a drain leave one).
func (m *Machine) checkDrained() {
	if !m.draining || m.exited || m.busy() || len(m.outbox) > 0 || m.parked != 0 || m.noticing {
		return
	}
	m.cancelTimer(TimerGrace)
	if m.updating != "" {
		if !m.applying {
			m.applying = true
			m.log(slog.LevelInfo, "drained for the update; installing it", slog.String("version", m.updateVersion))
			m.emit(ApplyOTA{CommandID: m.updating, Version: m.updateVersion})
		}
		return
	}
	m.exit(0, "drained after "+m.drainReason)
}

func (m *Machine) exit(code int, reason string) {
	for _, id := range Timers {
		m.cancelTimer(id)
	}
	m.setState(StateExiting)
	m.exited = true
	m.emit(Exit{Code: code, Reason: reason})
}

// onKeyRevoked ends the daemon: the plane refuses everything its key
// signs, so no result could be posted and no command received. Work in
// flight is cancelled rather than left to outlive the exit.
func (m *Machine) onKeyRevoked(e KeyRevoked) {
	msg := "the control plane revoked this host's key"
	if e.Message != "" {
		msg += " (" + e.Message + ")"
	}
	if len(m.execs)+len(m.runs) > 0 {
		m.emit(CancelInFlight{})
	}
	m.exit(2, msg+"; run nymph daemon join with a new token (nymph ctl token) to enroll again")
}
