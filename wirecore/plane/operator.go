package plane

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Defaults of a streamed exec's LogSink.
const (
	DefaultFlushMS    = 200
	DefaultFlushBytes = 64 << 10
)

// MaxLogWait caps the wait_s of a logs request.
const MaxLogWait = 60 * time.Second

func (p *Plane) opError(req RequestID, status int, format string, args ...any) {
	p.reply(req, status, operator.Error{Error: fmt.Sprintf(format, args...)})
}

// target finds the worker an operator request names, or answers 404.
func (p *Plane) target(req RequestID, id string) *worker {
	w := p.workers[id]
	if w == nil {
		p.opError(req, StatusNotFound, "unknown worker %q", id)
	}
	return w
}

// targetIf is target for a command whose body is sound only if sound: an
// unknown worker is answered 404 first, then an unsound body 400 with
// problem; either way there is no worker to enqueue for.
func (p *Plane) targetIf(req RequestID, id string, sound bool, problem string) *worker {
	w := p.target(req, id)
	if w != nil && !sound {
		p.opError(req, StatusBadRequest, "%s", problem)
		return nil
	}
	return w
}

func (p *Plane) onListWorkers(e ListWorkers) {
	out := make([]operator.Worker, 0, len(p.workerOrder))
	for _, w := range p.workerOrder {
		out = append(out, workerView(w, len(p.runningOn[w.ID()])))
	}
	p.reply(e.Req, StatusOK, out)
}

func (p *Plane) onGetWorker(e GetWorker) {
	if w := p.target(e.Req, e.WorkerID); w != nil {
		p.reply(e.Req, StatusOK, workerView(w, len(p.runningOn[w.ID()])))
	}
}

// enqueue appends a command to w's queue, persists it, and wakes w's
// parked poll.
func (p *Plane) enqueue(w *worker, kind string, body []byte, now time.Time, fill func(*CommandRecord)) CommandRecord {
	c := CommandRecord{ID: p.newULID(now), WorkerID: w.ID(), Seq: p.nextSeq(), Kind: kind, Body: body, CreatedAt: now}
	if fill != nil {
		fill(&c)
	}
	w.pending = append(w.pending, c)
	p.putCommand(c)
	return c
}

func (p *Plane) onEnqueueExec(now time.Time, e EnqueueExec) {
	if err := wire.CheckExecPayload(e.Body.PayloadInline, e.Body.PayloadRef); err != nil {
		p.opError(e.Req, StatusBadRequest, "exec: %v", err)
		return
	}
	w := p.targetIf(e.Req, e.WorkerID, e.Body.Command != "", "exec: command is required")
	if w == nil {
		return
	}
	body := p.execBody(&e.Body)
	raw, _ := body.MarshalMsg(nil)
	c := p.enqueue(w, wire.KindExec, raw, now, func(c *CommandRecord) { c.ExecID = body.ExecID })
	ex := &ExecRecord{ExecID: body.ExecID, CommandID: c.ID, WorkerID: w.ID(), State: ExecQueued, Stream: e.Body.Stream, CreatedAt: now}
	p.execs[ex.ExecID] = ex
	p.putExec(ex)
	p.wakeWorker(w, now)
	p.reply(e.Req, StatusOK, operator.ExecAccepted{ExecID: ex.ExecID, CommandID: c.ID})
}

// execBody is the exec command an operator's request makes, under a new
// exec id; a streamed one posts its chunks below ChunkURLBase.
func (p *Plane) execBody(r *operator.ExecRequest) wire.Exec {
	body := wire.Exec{ExecID: p.newExecID(), Command: r.Command, Env: r.Env, Workdir: r.Workdir,
		PayloadInline: wire.Blob(r.PayloadInline), PayloadRef: r.PayloadRef}
	if body.Env == nil {
		body.Env = map[string]string{}
	}
	if r.Stdin != nil {
		body.Stdin = *r.Stdin
	}
	if r.TimeoutS != nil {
		t := wire.Number(*r.TimeoutS)
		body.TimeoutS = &t
	}
	if r.Stream {
		body.Log = &wire.LogSink{
			StdoutURL:  p.cfg.ChunkURLBase + wire.PathExecChunk(body.ExecID),
			FlushMS:    wire.Int(cmp0(r.FlushMS, DefaultFlushMS)),
			FlushBytes: wire.Int(cmp0(r.FlushBytes, DefaultFlushBytes)),
		}
	}
	return body
}

func cmp0(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func (p *Plane) onEnqueueSetup(now time.Time, e EnqueueSetup) {
	w := p.targetIf(e.Req, e.WorkerID, e.Body.Script != "", "setup: script is required")
	if w == nil {
		return
	}
	r := &e.Body
	body := wire.Setup{Script: r.Script, Sudo: r.Sudo, RefreshCapabilities: r.RefreshCapabilities}
	if r.Name != "" {
		body.Name = &r.Name
	}
	raw, _ := body.MarshalMsg(nil)
	c := p.enqueue(w, wire.KindSetup, raw, now, func(c *CommandRecord) { c.Refresh = r.RefreshCapabilities })
	if w.rec.State == WorkerActive {
		w.rec.State = WorkerSettingUp
		p.putWorker(w)
	}
	p.wakeWorker(w, now)
	p.reply(e.Req, StatusOK, operator.CommandAccepted{CommandID: c.ID, WorkerID: w.ID()})
}

func (p *Plane) onEnqueueHibernate(now time.Time, e EnqueueHibernate) {
	w := p.targetIf(e.Req, e.WorkerID, e.Body.UntilEpochS > 0, "hibernate: until_epoch_s is required")
	if w == nil {
		return
	}
	// A whole second, rounded up: it goes out as an integer, and a daemon
	// never wakes before the time the operator asked for.
	until := wire.Number(math.Ceil(e.Body.UntilEpochS))
	raw, _ := (&wire.Hibernate{UntilEpochS: until}).MarshalMsg(nil)
	p.enqueueSimple(e.Req, w, wire.KindHibernate, raw, now)
}

func (p *Plane) onEnqueueReset(now time.Time, e EnqueueReset) {
	if w := p.target(e.Req, e.WorkerID); w != nil {
		p.enqueueSimple(e.Req, w, wire.KindResetBackoff, msgp.AppendNil(nil), now)
	}
}

func (p *Plane) onEnqueueRotateKey(now time.Time, e EnqueueRotateKey) {
	if w := p.target(e.Req, e.WorkerID); w != nil {
		p.enqueueSimple(e.Req, w, wire.KindRotateKey, msgp.AppendNil(nil), now)
	}
}

func (p *Plane) onEnqueueUpdate(now time.Time, e EnqueueUpdate) {
	r := &e.Body
	w := p.targetIf(e.Req, e.WorkerID, r.Version != "" && r.URL != "", "update: version and url are required")
	if w == nil {
		return
	}
	if !wire.ValidSHA256(r.SHA256) {
		p.opError(e.Req, StatusBadRequest, "update: sha256 must be 64 hex digits")
		return
	}
	raw, _ := (&wire.OTAUpdate{Version: r.Version, URL: r.URL, SHA256: strings.ToLower(r.SHA256)}).MarshalMsg(nil)
	w.rec.TargetVersion = r.Version
	w.rec.Update = &UpdateRecord{Version: r.Version, From: deref(w.rec.Versions.Daemon), State: UpdateQueued, At: now}
	p.putWorker(w)
	c := p.enqueue(w, wire.KindOTAUpdate, raw, now, nil)
	p.wakeWorker(w, now)
	p.reply(e.Req, StatusOK, operator.CommandAccepted{CommandID: c.ID, WorkerID: w.ID(), Version: r.Version})
}

func (p *Plane) enqueueSimple(req RequestID, w *worker, kind string, body []byte, now time.Time) {
	c := p.enqueue(w, kind, body, now, nil)
	p.wakeWorker(w, now)
	p.reply(req, StatusOK, operator.CommandAccepted{CommandID: c.ID, WorkerID: w.ID()})
}

func (p *Plane) onGetExec(e GetExec) {
	ex := p.execs[e.ExecID]
	if ex == nil {
		p.opError(e.Req, StatusNotFound, "unknown exec %q", e.ExecID)
		return
	}
	p.reply(e.Req, StatusOK, execStatusView(ex))
}

func execStatusView(ex *ExecRecord) operator.ExecStatus {
	return operator.ExecStatus{ExecID: ex.ExecID, WorkerID: ex.WorkerID, State: ex.State, Result: ex.Result}
}

func (p *Plane) onWaitLogs(now time.Time, e WaitLogs) {
	ex := p.execs[e.ExecID]
	if ex == nil {
		p.opError(e.Req, StatusNotFound, "unknown exec %q", e.ExecID)
		return
	}
	if e.Offset < 0 {
		p.opError(e.Req, StatusBadRequest, "logs: offset must not be negative")
		return
	}
	wait := cappedWait(e.WaitS, MaxLogWait)
	if ex.LogSize > e.Offset || ex.State == ExecFinished || wait <= 0 {
		p.replyLogs(e.Req, ex, e.Offset)
		return
	}
	until := now.Add(wait)
	p.parked[e.Req] = &parked{kind: parkLogs, until: until, execID: ex.ExecID, offset: e.Offset}
	p.logWaits[ex.ExecID] = append(p.logWaits[ex.ExecID], e.Req)
	p.park(e.Req, until)
}

func (p *Plane) onListInvocations(e ListInvocations) {
	out := make([]operator.Invocation, 0, len(p.invOrder))
	for _, id := range p.invOrder {
		if inv := p.invocations[id]; inv != nil { // nil: forgotten (Retain)
			out = append(out, p.invocationView(inv))
		}
	}
	p.reply(e.Req, StatusOK, out)
}

func (p *Plane) onGetInvocation(e GetInvocation) {
	inv := p.invocations[e.InvocationID]
	if inv == nil {
		p.opError(e.Req, StatusNotFound, "unknown invocation %q", e.InvocationID)
		return
	}
	p.reply(e.Req, StatusOK, p.invocationView(inv))
}

func (p *Plane) onEnqueueRun(now time.Time, e EnqueueRun) {
	r := &e.Body
	if r.Function.Module == "" && r.Script == nil {
		p.opError(e.Req, StatusBadRequest, "run: function.module or script is required")
		return
	}
	if r.PayloadRef != nil {
		err := r.PayloadRef.Check()
		if err == nil && len(r.ArgsBlob) > 0 {
			err = fmt.Errorf("%w: both args_blob and payload_ref", wire.ErrPayloadInvalid)
		}
		if err != nil {
			p.opError(e.Req, StatusBadRequest, "run: %v", err)
			return
		}
	}
	queue := r.Queue
	if queue == "" {
		queue = DefaultQueue
	}
	if strings.HasSuffix(queue, "*") {
		p.opError(e.Req, StatusBadRequest, "run: queue %q: a run is queued on one queue, not a pattern", queue)
		return
	}
	inv := &InvocationRecord{
		ID:           p.newULID(now),
		Seq:          p.nextSeq(),
		Queue:        queue,
		Function:     r.Function,
		RunConfig:    r.RunConfig,
		ArgsBlob:     slices.Clone(r.ArgsBlob),
		RequiredTags: slices.Clone(r.RequiredTags),
		Script:       r.Script,
		AsUser:       r.AsUser,
		PayloadRef:   r.PayloadRef,
		State:        InvocationQueued,
		CreatedAt:    now,
	}
	if inv.ArgsBlob == nil {
		inv.ArgsBlob = []byte{}
	}
	p.invocations[inv.ID] = inv
	p.invOrder = append(p.invOrder, inv.ID)
	p.queued = append(p.queued, inv)
	p.putInvocation(inv)
	p.wakeForRuns(now)
	p.reply(e.Req, StatusOK, p.invocationView(inv))
}

func (p *Plane) onKill(now time.Time, e Kill) {
	inv := p.invocations[e.InvocationID]
	switch {
	case inv == nil:
		p.opError(e.Req, StatusNotFound, "unknown invocation %q", e.InvocationID)
	case inv.State == InvocationRunning:
		w := p.workers[inv.WorkerID]
		if w == nil || !w.uses(wire.ExtCancel) {
			p.opError(e.Req, StatusConflict, "invocation %s is running on worker %s, whose daemon does not speak the cancel extension (protocol \"1\" has no cancel command): it can only be waited for, or its daemon stopped", inv.ID, inv.WorkerID)
			return
		}
		p.sendCancel(w, wire.Cancel{InvocationID: inv.ID, Reason: killReason(e.Reason)}, now)
		p.reply(e.Req, StatusAccepted, p.invocationView(inv))
	case inv.State != InvocationQueued:
		p.opError(e.Req, StatusConflict, "invocation %s already %s", inv.ID, inv.State)
	default:
		inv.State = InvocationKilled
		inv.FinishedAt = now
		p.noteFinished(false, inv.ID, now)
		p.dequeue(inv.ID)
		p.putInvocation(inv)
		p.reply(e.Req, StatusOK, p.invocationView(inv))
	}
}

// onSetConfig changes a worker's live configuration and, when its daemon
// speaks wire.ExtConfig, sends it at once (its parked poll is answered).
func (p *Plane) onSetConfig(now time.Time, e SetConfig) {
	w := p.target(e.Req, e.WorkerID)
	if w == nil {
		return
	}
	next := maps.Clone(w.rec.LiveConfig)
	if next == nil {
		next = map[string]string{}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Set)) {
		v := e.Set[k]
		if v == "" {
			delete(next, k)
			continue
		}
		if _, err := wire.ParseLiveConfig(k, v); err != nil {
			p.opError(e.Req, StatusBadRequest, "config: %v", err)
			return
		}
		next[k] = v
	}
	if lo, hi := next[wire.ConfigRetryMinS], next[wire.ConfigRetryMaxS]; lo != "" && hi != "" {
		a, _ := wire.ParseLiveConfig(wire.ConfigRetryMinS, lo)
		b, _ := wire.ParseLiveConfig(wire.ConfigRetryMaxS, hi)
		if !wire.RetryBoundsOrdered(a.Number, b.Number) {
			p.opError(e.Req, StatusBadRequest, "config: %s = %s is over %s = %s", wire.ConfigRetryMinS, lo, wire.ConfigRetryMaxS, hi)
			return
		}
	}
	if len(next) == 0 {
		next = nil
	}
	w.rec.LiveConfig = next
	w.rec.ConfigGen++
	p.putWorker(w)
	if w.uses(wire.ExtConfig) {
		p.answerParkedPoll(w, now)
	}
	p.reply(e.Req, StatusOK, workerView(w, len(p.runningOn[w.ID()])))
}

// liveConfig is the worker's live configuration in wire form, into dst.
func liveConfig(dst map[string]msgp.Raw, w *worker) map[string]msgp.Raw {
	dst[wire.ConfigGeneration] = msgp.AppendUint64(nil, w.rec.ConfigGen)
	for k, v := range w.rec.LiveConfig {
		if lv, err := wire.ParseLiveConfig(k, v); err == nil {
			dst[k] = wire.EncodeLiveConfig(k, lv)
		}
	}
	return dst
}

// killReason is the reason a cancel carries: the operator's, or a default.
func killReason(r string) string {
	if r == "" {
		return "killed by an operator"
	}
	return r
}

// sendCancel queues a cancel for w's daemon and wakes its poll.
func (p *Plane) sendCancel(w *worker, c wire.Cancel, now time.Time) {
	raw, _ := c.MarshalMsg(nil)
	p.enqueue(w, wire.KindCancel, raw, now, nil)
	p.wakeWorker(w, now)
}

// onKillExec withdraws a queued exec (it finishes at -1 without running)
// or cancels a delivered one on a daemon that speaks wire.ExtCancel.
func (p *Plane) onKillExec(now time.Time, e KillExec) {
	ex := p.execs[e.ExecID]
	switch {
	case ex == nil:
		p.opError(e.Req, StatusNotFound, "unknown exec %q", e.ExecID)
	case ex.State == ExecFinished:
		p.opError(e.Req, StatusConflict, "exec %s already finished", ex.ExecID)
	case ex.State == ExecQueued:
		w := p.workers[ex.WorkerID]
		if w != nil {
			if i := slices.IndexFunc(w.pending, func(c CommandRecord) bool { return c.ExecID == ex.ExecID }); i >= 0 {
				p.deleteCommand(w.pending[i].ID)
				w.pending = slices.Delete(w.pending, i, i+1)
			}
		}
		msg := "killed before it ran: " + killReason(e.Reason)
		p.finishExec(ex, &wire.ExecResult{ExitCode: wire.ExitSpawnFailed, Error: &msg}, now)
		p.reply(e.Req, StatusOK, execStatusView(ex))
	default:
		w := p.workers[ex.WorkerID]
		if w == nil || !w.uses(wire.ExtCancel) {
			p.opError(e.Req, StatusConflict, "exec %s is running on worker %s, whose daemon does not speak the cancel extension (protocol \"1\" has no cancel command)", ex.ExecID, ex.WorkerID)
			return
		}
		p.sendCancel(w, wire.Cancel{ExecID: ex.ExecID, Reason: killReason(e.Reason)}, now)
		p.reply(e.Req, StatusAccepted, execStatusView(ex))
	}
}

// dequeue removes an invocation from the run queue, if it is there.
func (p *Plane) dequeue(id string) {
	if i := slices.IndexFunc(p.queued, func(r *InvocationRecord) bool { return r.ID == id }); i >= 0 {
		p.queued = slices.Delete(p.queued, i, i+1)
	}
}

func workerView(w *worker, running int) operator.Worker {
	r := cloneWorker(w.rec)
	return operator.Worker{
		ID:              r.ID,
		MachineID:       r.MachineID,
		Label:           r.Label,
		Tags:            nonNil(r.Tags),
		Queues:          nonNil(r.Queues),
		Capabilities:    r.Capabilities,
		Versions:        versionsMap(&r.Versions),
		State:           r.State,
		LastSeenEpochS:  wire.EpochSeconds(r.LastSeen),
		PendingCommands: len(w.pending),
		Running:         running,
		KeyID:           r.KeyID,
		KeyRevoked:      r.KeyRevoked,
		Update:          updateView(r.Update),
		LiveConfig:      r.LiveConfig,
		Extensions:      nonNil(r.Extensions),
	}
}

func updateView(u *UpdateRecord) *operator.UpdateStatus {
	if u == nil {
		return nil
	}
	return &operator.UpdateStatus{Version: u.Version, From: u.From, State: u.State, AtEpochS: wire.EpochSeconds(u.At), Running: u.Running}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// versionsMap spells versions with their wire keys, nulls included.
func versionsMap(v *wire.Versions) map[string]any {
	str := func(s *string) any {
		if s == nil {
			return nil
		}
		return *s
	}
	m := map[string]any{
		"daemon": str(v.Daemon), "protocol": str(v.Protocol), "runsc": str(v.Runsc),
		"docker": str(v.Docker), "python": str(v.Python), "kernel": str(v.Kernel),
		"distro": str(v.Distro), "arch": str(v.Arch), "cpu": nil, "gpu": nil,
	}
	if v.CPU != nil {
		m["cpu"] = map[string]any{"model": v.CPU.Model, "cores": int64(v.CPU.Cores)}
	}
	if v.GPU != nil {
		gpus := make([]any, 0, len(v.GPU))
		for _, g := range v.GPU {
			gpus = append(gpus, map[string]any{"name": g.Name, "driver": g.Driver, "cuda": str(g.CUDA)})
		}
		m["gpu"] = gpus
	}
	return m
}

func (p *Plane) invocationView(r *InvocationRecord) operator.Invocation {
	v := invocationView(r)
	v.StdoutTail = p.tails[r.ID]
	return v
}

func invocationView(r *InvocationRecord) operator.Invocation {
	return operator.Invocation{
		ID:             r.ID,
		Queue:          r.Queue,
		Runner:         r.RunConfig.Runner,
		WorkerID:       r.WorkerID,
		State:          r.State,
		ResultBlob:     r.ResultBlob,
		Error:          r.Error,
		CreatedEpochS:  wire.EpochSeconds(r.CreatedAt),
		StartedEpochS:  wire.EpochSeconds(r.StartedAt),
		FinishedEpochS: wire.EpochSeconds(r.FinishedAt),
	}
}
