package plane

import (
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

func (p *Plane) onAck(now time.Time, e Ack) {
	a := &e.Body
	if v := a.Validate(); v != nil {
		p.reply(e.Req, StatusUnprocessableEntity, *v)
		return
	}
	switch a.State {
	case wire.StateSucceeded, wire.StateFailed, wire.StateKilled:
	default:
		p.reply(e.Req, StatusUnprocessableEntity, wire.ValidationError{Error: "invalid_state", Field: "state",
			Message: "state: want " + wire.StateSucceeded + ", " + wire.StateFailed + " or " + wire.StateKilled})
		return
	}
	by, ok := p.caller(now, e.Req, &e.Auth)
	if !ok {
		return
	}
	// The worker an ack names must be its sender's: a key's, or for a
	// bearer, a worker without a key.
	if a.WorkerID != "" && !p.actsFor(e.Req, by, a.WorkerID, "ack of invocation "+a.InvocationID) {
		return
	}
	if cmdID, ok := wire.SetupCommandID(a.InvocationID); ok {
		holder := p.setupHolder(cmdID)
		target := a.WorkerID
		if holder != nil {
			target = holder.ID()
		} else if by != nil {
			target = by.ID() // nothing in flight: a repeat, which changes nothing
		}
		if !p.actsFor(e.Req, by, target, "ack of setup "+cmdID) {
			return
		}
		p.setupAcked(holder, a, cmdID)
		p.reply(e.Req, StatusOK, OK{})
		p.answerParkedPoll(holder, now)
		return
	}
	inv := p.invocations[a.InvocationID]
	if inv == nil {
		p.reply(e.Req, StatusNotFound, ErrorBody{Error: ErrUnknownInvocation})
		return
	}
	if !p.actsFor(e.Req, by, inv.WorkerID, "ack of invocation "+inv.ID) {
		return
	}
	// A repeated ack is acknowledged and ignored; but an invocation failed
	// as WorkerLost takes its worker's own word when the worker comes back.
	lostMark := inv.State == InvocationFailed && inv.Error != nil && inv.Error.TypeName == wire.ErrTypeWorkerLost
	if inv.State != InvocationRunning && inv.State != InvocationQueued && !lostMark {
		p.reply(e.Req, StatusOK, OK{})
		return
	}
	if lostMark && a.WorkerID != "" && a.WorkerID != inv.WorkerID {
		p.reply(e.Req, StatusOK, OK{})
		return
	}
	holder := p.workers[inv.WorkerID]
	wasBusy := holder != nil && p.busy(holder)
	inv.State = a.State
	inv.ResultBlob = slices.Clone([]byte(a.ResultBlob))
	inv.Error = cloneErrorInfo(a.Error)
	inv.FinishedAt = now
	p.noteFinished(false, inv.ID, now)
	p.dequeue(inv.ID)
	p.clearRunning(inv) // before the worker id changes: it indexes runningOn
	if inv.WorkerID == "" {
		inv.WorkerID = a.WorkerID
	}
	p.putInvocation(inv)
	p.ended(holder, wasBusy, now)
	p.reply(e.Req, StatusOK, OK{})
	p.answerParkedPoll(p.workers[inv.WorkerID], now)
}

// setupHolder is the worker that has setup cmdID in flight, whichever
// worker the ack names; nil when none has (a setup delivered before a
// restart of its daemon, or a repeat: a daemon retrying its acks, a herd
// of them after an outage, costs a lookup each, not a walk of the fleet).
func (p *Plane) setupHolder(cmdID string) *worker { return p.setupBy[cmdID] }

// setupSent records setup s as in flight on w.
func (p *Plane) setupSent(w *worker, s SetupInFlight) {
	w.rec.SetupsInFlight = append(w.rec.SetupsInFlight, s)
	p.setupBy[s.CommandID] = w
}

// setupsDone ends w's setups in flight that keep refuses.
func (p *Plane) setupsDone(w *worker, keep func(SetupInFlight) bool) {
	w.rec.SetupsInFlight = slices.DeleteFunc(w.rec.SetupsInFlight, func(s SetupInFlight) bool {
		if keep(s) {
			return false
		}
		if p.setupBy[s.CommandID] == w {
			delete(p.setupBy, s.CommandID)
		}
		return true
	})
}

func noSetup(SetupInFlight) bool { return false }

// setupAcked ends setup cmdID of w, its holder (nil: nothing changes):
// the worker settles once its FIFO is drained, no setup is in flight, and
// a successful refresh setup's capabilities have arrived.
func (p *Plane) setupAcked(w *worker, a *wire.Ack, cmdID string) {
	if w == nil {
		return
	}
	r := &w.rec
	i := slices.IndexFunc(r.SetupsInFlight, func(s SetupInFlight) bool { return s.CommandID == cmdID })
	if r.SetupsInFlight[i].Refresh && a.State == wire.StateSucceeded {
		r.AwaitingCapabilities = true
	}
	p.setupsDone(w, func(s SetupInFlight) bool { return s.CommandID != cmdID })
	if r.State == WorkerSettingUp || r.State == WorkerActive {
		r.State = p.settledState(w)
	}
	p.putWorker(w)
}

func cloneErrorInfo(e *wire.ErrorInfo) *wire.ErrorInfo {
	if e == nil {
		return nil
	}
	c := *e
	if e.Traceback != nil {
		t := *e.Traceback
		c.Traceback = &t
	}
	return &c
}

// daemonExec finds the exec a daemon's result or chunk names, or answers
// 422 for an id no exec could have and 404 for one no exec has.
func (p *Plane) daemonExec(req RequestID, id string) *ExecRecord {
	if v := wire.CheckID("exec_id", id, wire.MaxIDBytes); v != nil {
		p.reply(req, StatusUnprocessableEntity, *v)
		return nil
	}
	ex := p.execs[id]
	if ex == nil {
		p.reply(req, StatusNotFound, ErrorBody{Error: ErrUnknownExec})
	}
	return ex
}

// daemonExecFor is daemonExec for a request authenticated by Auth: the
// exec id in the URL is the credential, and when the request is signed,
// or the exec's worker has a key, the exec must be the signer's.
func (p *Plane) daemonExecFor(now time.Time, req RequestID, id string, a *Auth, what string) *ExecRecord {
	by, ok := p.caller(now, req, a)
	if !ok {
		return nil
	}
	ex := p.daemonExec(req, id)
	if ex == nil || !p.actsFor(req, by, ex.WorkerID, what+" of exec "+id) {
		return nil
	}
	return ex
}

func (p *Plane) onExecResult(now time.Time, e ExecResult) {
	ex := p.daemonExecFor(now, e.Req, e.ExecID, &e.Auth, "result")
	if ex == nil {
		return
	}
	if ex.Result != nil {
		p.reply(e.Req, StatusOK, OK{}) // recorded once; a retry is acknowledged
		return
	}
	res := e.Body
	res.ResultInline = slices.Clone(res.ResultInline)
	res.ResultRef = slices.Clone(res.ResultRef)
	holder := p.workers[ex.WorkerID]
	wasBusy := holder != nil && p.busy(holder)
	p.finishExec(ex, &res, now)
	p.ended(holder, wasBusy, now)
	p.reply(e.Req, StatusOK, OK{})
	p.answerParkedPoll(p.workers[ex.WorkerID], now)
}

func (p *Plane) finishExec(ex *ExecRecord, res *wire.ExecResult, now time.Time) {
	ex.Result = res
	ex.State = ExecFinished
	ex.FinishedAt = now
	p.noteFinished(true, ex.ExecID, now)
	if ex.DeliveredAt.IsZero() {
		ex.DeliveredAt = now
	}
	if w := p.workers[ex.WorkerID]; w != nil {
		w.openExec(ex.ExecID, false)
	}
	p.putExec(ex)
	p.wakeLogs(ex, now)
}

func (p *Plane) onChunk(now time.Time, e Chunk) {
	ex := p.daemonExecFor(now, e.Req, e.ExecID, &e.Auth, "log chunk")
	if ex == nil {
		return
	}
	if len(e.Data) > 0 {
		p.batch.appendChunk(ChunkRecord{ExecID: ex.ExecID, Offset: ex.LogSize, Data: e.Data, At: now})
		ex.LogSize += int64(len(e.Data))
		p.putExec(ex)
		p.wakeLogs(ex, now)
	}
	p.reply(e.Req, StatusOK, OK{})
}

// wakeLogs answers the log waits of ex that now have bytes or an end.
func (p *Plane) wakeLogs(ex *ExecRecord, now time.Time) {
	var ready []RequestID
	for _, req := range p.logWaits[ex.ExecID] {
		if pk := p.parked[req]; pk != nil && (pk.offset < ex.LogSize || ex.State == ExecFinished) {
			ready = append(ready, req)
		}
	}
	for _, req := range ready {
		offset := p.parked[req].offset
		p.unpark(req, now)
		p.replyLogs(req, ex, offset)
	}
}

func (p *Plane) replyLogs(req RequestID, ex *ExecRecord, offset int64) {
	p.reply(req, StatusOK, LogsRange{
		ExecID:   ex.ExecID,
		Offset:   offset,
		End:      max(ex.LogSize, offset),
		Finished: ex.State == ExecFinished,
	})
}
