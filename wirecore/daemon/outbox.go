package daemon

import (
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// An outcome (an ack or an exec result) is the one thing a daemon cannot
// recompute, so a post that fails for a reason that may pass is sent
// again, on a budget per post as buildkite-agent retries its API calls:
// up to PostAttempts attempts, PostRetryMinS after the first failure,
// doubling to PostRetryMaxS, with the poll's jitter. A post the control
// plane refused on its merits (400, 404, 409, 413, 422 …) is not sent
// again: it would get the same answer. During a drain, posts waiting to be
// sent again keep the daemon up for at most grace_s; when the grace
// expires (or a second signal comes) they are given up, logged and
// counted.
const (
	PostAttempts  = 10
	PostRetryMinS = 1.0
	PostRetryMaxS = 60.0
)

// outgoing is one outcome being posted: in flight (due is zero) or
// waiting to be sent again at due.
type outgoing struct {
	ack      *wire.Ack // an ack, or else
	execID   string    // an exec result
	result   wire.ExecResult
	attempts int
	wait     backoff
	due      time.Time
}

func (o *outgoing) what() string {
	if o.ack != nil {
		return "ack"
	}
	return "exec result"
}

func (o *outgoing) id() string {
	if o.ack != nil {
		return o.ack.InvocationID
	}
	return o.execID
}

// postRetryable reports whether a post that got status (0: no answer at
// all; StatusUnsent is not retried) may succeed if sent again: no answer,
// or a status a hello or poll would retry too (a timeout, a rate limit,
// the control plane or a relay's upstream unavailable).
func postRetryable(status int) bool { return status == 0 || retryableStatus(status) }

func (m *Machine) ack(invocationID, state string, blob []byte, errInfo *wire.ErrorInfo) {
	m.post(&outgoing{ack: &wire.Ack{
		InvocationID: invocationID,
		State:        state,
		ResultBlob:   wire.SharedBlob(blob),
		Error:        errInfo,
		WorkerID:     m.workerID,
	}})
}

func (m *Machine) postExecResult(execID string, r wire.ExecResult) {
	m.post(&outgoing{execID: execID, result: r})
}

func (m *Machine) post(o *outgoing) {
	o.wait = newBackoff(PostRetryMinS, PostRetryMaxS)
	m.outbox = append(m.outbox, o)
	m.send(o)
}

func (m *Machine) send(o *outgoing) {
	o.attempts++
	o.due = time.Time{}
	if o.ack != nil {
		m.emit(PostAck{Ack: *o.ack})
		return
	}
	m.emit(PostExecResult{ExecID: o.execID, Result: o.result})
}

// onPosted takes the answer to a post of what (ack or exec result) id.
func (m *Machine) onPosted(now time.Time, what, id string, status int, err error, failed *uint64) {
	i := slices.IndexFunc(m.outbox, func(o *outgoing) bool { return o.due.IsZero() && o.what() == what && o.id() == id })
	if i < 0 {
		m.log(slog.LevelWarn, what+" posted but none was pending", slog.String("id", id))
		return
	}
	o := m.outbox[i]
	if err == nil {
		m.outbox = slices.Delete(m.outbox, i, i+1)
		m.checkDrained()
		return
	}
	if postRetryable(status) && o.attempts < PostAttempts && !m.cancelled {
		wait := o.wait.next(m.rnd.Float64())
		o.due = now.Add(wait)
		m.log(slog.LevelWarn, what+" not delivered; sending it again", slog.String("id", id),
			slog.String("error", err.Error()), slog.Int("attempt", o.attempts), slog.Int("of", PostAttempts),
			slog.Duration("in", wait))
		m.armRepost()
		if m.draining && m.timers[TimerIndex(TimerGrace)].IsZero() {
			m.setTimer(TimerGrace, now.Add(seconds(max(m.cfg.GraceS, 0))))
		}
		return
	}
	m.outbox = slices.Delete(m.outbox, i, i+1)
	*failed++
	why := "refused"
	switch {
	case m.cancelled:
		why = "given up at shutdown"
	case postRetryable(status):
		why = "given up after " + strconv.Itoa(o.attempts) + " attempts"
	}
	m.log(slog.LevelWarn, what+" not delivered: "+why, slog.String("id", id), slog.String("error", err.Error()))
	m.checkDrained()
}

// onRepost sends every post whose wait is over.
func (m *Machine) onRepost(now time.Time) {
	for _, o := range m.outbox {
		if !o.due.IsZero() && !o.due.After(now) {
			m.send(o)
		}
	}
	m.armRepost()
}

// armRepost sets TimerRepost to the earliest post waiting to be sent
// again, or cancels it when none waits.
func (m *Machine) armRepost() {
	var next time.Time
	for _, o := range m.outbox {
		if !o.due.IsZero() && (next.IsZero() || o.due.Before(next)) {
			next = o.due
		}
	}
	switch {
	case next.IsZero():
		m.cancelTimer(TimerRepost)
	case !m.timers[TimerIndex(TimerRepost)].Equal(next):
		m.setTimer(TimerRepost, next)
	}
}

// repostsWaiting reports whether a post waits to be sent again.
func (m *Machine) repostsWaiting() bool {
	return slices.ContainsFunc(m.outbox, func(o *outgoing) bool { return !o.due.IsZero() })
}

// giveUpReposts drops the posts waiting to be sent again (the shutdown
// grace is over), logging and counting each.
func (m *Machine) giveUpReposts() {
	m.outbox = slices.DeleteFunc(m.outbox, func(o *outgoing) bool {
		if o.due.IsZero() {
			return false
		}
		if o.ack != nil {
			m.counters.AcksFailed++
		} else {
			m.counters.ResultsFailed++
		}
		m.log(slog.LevelWarn, o.what()+" not delivered: given up at shutdown", slog.String("id", o.id()),
			slog.Int("attempts", o.attempts))
		return true
	})
	m.cancelTimer(TimerRepost)
}
