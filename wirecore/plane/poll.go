package plane

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// DefaultQueue is the queue of a poll that names none and of a run request
// that names none.
const DefaultQueue = "default"

func (p *Plane) onPoll(now time.Time, e Poll) {
	if v := e.Body.Validate(); v != nil {
		p.reply(e.Req, StatusUnprocessableEntity, *v)
		return
	}
	by, ok := p.caller(now, e.Req, &e.Auth)
	if !ok {
		return
	}
	w := p.workers[e.Body.WorkerID]
	if !p.actsForWorker(e.Req, by, w, e.Body.WorkerID, "poll") {
		return // a worker the plane does not have among them (404)
	}
	if w.hasPoll {
		// A daemon has one poll open at a time; an older one is a
		// connection the daemon already gave up on.
		old := w.poll
		p.unpark(old, now)
		p.replyPoll(old, w, nil)
	}
	p.seen(w, now)
	p.keepAlive(w, e.Body.Invocations, now)
	if c := e.Body.UpdatedCapabilities; c != nil && p.newerCapabilities(w, e.Body.CapabilitiesGen) {
		p.mergeCapabilities(w, c)
	}
	var again []CommandRecord
	if w.uses(wire.ExtCursor) {
		p.confirm(w, wire.ParseCursor(e.Body.Cursor))
		again = p.redeliverable(w)
	}
	if e.Body.Draining && w.uses(wire.ExtDrain) {
		// A draining daemon takes nothing more: its parked poll was
		// answered above, and this one is answered empty at once.
		p.replyPoll(e.Req, w, nil)
		return
	}
	queue := e.Body.Queue
	if queue == "" {
		queue = DefaultQueue
	}
	full := e.Body.Full && w.uses(wire.ExtCancel)
	cmds := append(again, p.takeCommands(w, queue, full, now)...)
	wait := p.pollWait(float64(e.Body.TimeoutS))
	if len(cmds) > 0 || wait <= 0 {
		p.replyPoll(e.Req, w, cmds)
		return
	}
	until := now.Add(wait)
	w.poll, w.hasPoll = e.Req, true
	w.park = parked{kind: parkPoll, until: until, w: w, queue: queue, full: full, at: now}
	p.parked[e.Req] = &w.park
	p.pollOrder = append(p.pollOrder, parkedPoll{req: e.Req, w: w})
	if len(p.pollOrder) > 2*len(p.parked)+64 {
		p.compactPollOrder()
	}
	p.park(e.Req, until)
}

// pollWait is how long a poll asking for secs may park (cappedWait under
// PollCap).
func (p *Plane) pollWait(secs float64) time.Duration { return cappedWait(secs, p.cfg.PollCap) }

// cappedWait is a wait of secs seconds from the wire, at most limit, which
// NaN, +Inf and any value too large for a Duration get too (converting
// them is left to the platform, and may come out negative), nothing for
// zero or less.
func cappedWait(secs float64, limit time.Duration) time.Duration {
	switch {
	case math.IsNaN(secs) || secs >= limit.Seconds():
		return limit
	case secs <= 0:
		return 0
	}
	return time.Duration(secs * float64(time.Second))
}

// ID is the worker's id.
func (w *worker) ID() string { return w.rec.ID }

// uses reports whether the worker's daemon agreed to extension ext.
func (w *worker) uses(ext string) bool { return w.ext.Has(ext) }

// seen records a sign of life: a lost or hibernating worker that polls is
// back.
func (p *Plane) seen(w *worker, now time.Time) {
	r := &w.rec
	r.LastSeen = now
	dirty := now.Sub(w.persistedSeen) >= p.cfg.PersistSeenEvery
	if r.State == WorkerLost || r.State == WorkerHibernating {
		r.State = p.settledState(w)
		r.HibernateUntil = time.Time{}
		dirty = true
	}
	if dirty {
		p.putWorker(w)
	}
}

// keepAlive marks the worker's reported running invocations alive.
func (p *Plane) keepAlive(w *worker, list []wire.InvocationStatus, now time.Time) {
	for i := range list {
		id := list[i].InvocationID
		if inv := p.invocations[id]; inv != nil && inv.State == InvocationRunning && inv.WorkerID == w.ID() {
			p.reported(id, now)
			if t := list[i].StdoutTail; t != "" {
				p.tails[id] = wire.StdoutTailOf(t)
			}
		}
	}
}

// newerCapabilities reports whether a snapshot of generation gen may be
// taken: always without the config extension (or a generation), else only
// past the last one taken, so a retried or overtaken poll's older
// snapshot never replaces a newer one.
func (p *Plane) newerCapabilities(w *worker, gen uint64) bool {
	if gen == 0 || !w.uses(wire.ExtConfig) {
		return true
	}
	if gen <= w.rec.CapabilitiesGen {
		return false
	}
	w.rec.CapabilitiesGen = gen
	return true
}

// mergeCapabilities takes a worker's refreshed capabilities: the refresh
// setup it was waiting for is done.
func (p *Plane) mergeCapabilities(w *worker, c *wire.Capabilities) {
	r := &w.rec
	if c.Runners != nil {
		r.Capabilities.Runners = slices.Clone(c.Runners)
	}
	r.Capabilities.MaxInvocations = c.MaxInvocations
	if c.Workdir != "" {
		r.Capabilities.Workdir = c.Workdir
	}
	r.AwaitingCapabilities = false
	// Refreshed capabilities are a refresh setup's outcome: it ran to exit
	// 0 (spec 003: the snapshot "flips the Worker from setting_up back to
	// active"). A daemon that acks its setups has acked it or will, and
	// that ack is then a repeat; one that does not ack them would
	// otherwise hold the worker setting_up for good.
	p.setupsDone(w, func(s SetupInFlight) bool { return !s.Refresh })
	r.State = p.settledState(w)
	p.putWorker(w)
}

// takeCommands removes and returns what one poll of w delivers: every
// queued control command, the oldest setup of its FIFO, the oldest exec,
// and the oldest queued run that fits — in queue order, a run last. A
// hibernate ends the list: the daemon discards whatever follows it. A
// full poll (every permit of the daemon taken) gets control commands only.
func (p *Plane) takeCommands(w *worker, queue string, full bool, now time.Time) []CommandRecord {
	var out []CommandRecord
	var setup, exec, hibernate bool
	kept := w.pending[:0]
	for _, c := range w.pending {
		take := !hibernate
		switch c.Kind {
		case wire.KindSetup:
			take = take && !setup && !full
			setup = setup || take
		case wire.KindExec:
			take = take && !exec && !full
			exec = exec || take
		}
		if !take {
			kept = append(kept, c)
			continue
		}
		out = append(out, p.delivered(w, c, now))
		hibernate = hibernate || c.Kind == wire.KindHibernate
	}
	clear(w.pending[len(kept):])
	w.pending = kept
	if !hibernate && !full && w.rec.State == WorkerActive {
		if run, ok := p.takeRun(w, queue, now); ok {
			if w.uses(wire.ExtCursor) {
				run = p.number(w, run)
			}
			out = append(out, run)
		}
	}
	if len(out) > 0 && w.uses(wire.ExtCursor) {
		p.putWorker(w) // its cursor moved: stored with the reply, once
	}
	return out
}

// delivered records that command c left for w, and returns it as it
// went: numbered and kept until confirmed under a cursor
// (wire.ExtCursor), else forgotten.
func (p *Plane) delivered(w *worker, c CommandRecord, now time.Time) CommandRecord {
	if w.uses(wire.ExtCursor) {
		c = p.number(w, c)
	} else {
		p.deleteCommand(c.ID)
	}
	p.deliveredEffects(w, c, now)
	return c
}

// number gives c the worker's next cursor and keeps it, durably, until
// the daemon's cursor reaches it; takeCommands stores the worker's new
// cursor once per reply.
func (p *Plane) number(w *worker, c CommandRecord) CommandRecord {
	w.rec.Cursor++
	c.Cursor = w.rec.Cursor
	w.unconfirmed = append(w.unconfirmed, c)
	p.putCommand(c)
	return c
}

// confirm forgets the commands the daemon's cursor has reached: it
// applied them.
func (p *Plane) confirm(w *worker, cursor uint64) {
	n := 0
	for _, c := range w.unconfirmed {
		if c.Cursor <= cursor {
			p.deleteCommand(c.ID)
			continue
		}
		w.unconfirmed[n] = c
		n++
	}
	clear(w.unconfirmed[n:])
	w.unconfirmed = w.unconfirmed[:n]
}

// redeliverable is what the daemon has not confirmed, to hand out again
// (it skips an id it applied already): those still worth running — an
// exec not finished, a run still running there under the same command.
func (p *Plane) redeliverable(w *worker) []CommandRecord {
	var out []CommandRecord
	n := 0
	for _, c := range w.unconfirmed {
		stale := false
		switch c.Kind {
		case wire.KindExec:
			ex := p.execs[c.ExecID]
			stale = ex == nil || ex.State == ExecFinished
		case wire.KindRun:
			inv := p.invocations[c.InvocationID]
			stale = inv == nil || inv.State != InvocationRunning || inv.CommandID != c.ID
		}
		if stale {
			p.deleteCommand(c.ID)
			continue
		}
		w.unconfirmed[n] = c
		n++
		out = append(out, c)
	}
	clear(w.unconfirmed[n:])
	w.unconfirmed = w.unconfirmed[:n]
	return out
}

// deliveredEffects updates what a delivered command stands for.
func (p *Plane) deliveredEffects(w *worker, c CommandRecord, now time.Time) {
	switch c.Kind {
	case wire.KindExec:
		if ex := p.execs[c.ExecID]; ex != nil && ex.State == ExecQueued {
			ex.State = ExecDelivered
			ex.DeliveredAt = now
			w.openExec(ex.ExecID, true)
			p.putExec(ex)
		}
	case wire.KindSetup:
		p.setupSent(w, SetupInFlight{CommandID: c.ID, Refresh: c.Refresh})
		p.putWorker(w)
	case wire.KindOTAUpdate:
		if u := w.rec.Update; u != nil && u.State == UpdateQueued {
			u.State, u.At = UpdateDelivered, now
			p.putWorker(w)
		}
	case wire.KindHibernate:
		var h wire.Hibernate
		if _, err := h.UnmarshalMsg(c.Body); err == nil {
			w.rec.State = WorkerHibernating
			w.rec.HibernateUntil = wire.EpochTime(float64(h.UntilEpochS))
			p.putWorker(w)
		}
	}
}

// takeRun hands w the oldest queued invocation it fits, as a run command.
func (p *Plane) takeRun(w *worker, queue string, now time.Time) (CommandRecord, bool) {
	i := slices.IndexFunc(p.queued, func(inv *InvocationRecord) bool { return fits(w, queue, inv) })
	if i < 0 {
		return CommandRecord{}, false
	}
	inv := p.queued[i]
	p.queued = slices.Delete(p.queued, i, i+1)
	inv.State = InvocationRunning
	inv.WorkerID = w.ID()
	inv.CommandID = p.newULID(now)
	inv.StartedAt = now
	p.setRunning(inv, now)
	p.putInvocation(inv)
	body := wire.Run{
		InvocationID:       inv.ID,
		Function:           inv.Function,
		RunConfig:          inv.RunConfig,
		ArgsBlob:           wire.Blob(inv.ArgsBlob),
		ParentInvocationID: inv.ParentInvocationID,
		RootInvocationID:   inv.RootInvocationID,
		Script:             inv.Script,
		AsUser:             inv.AsUser,
		PayloadRef:         inv.PayloadRef,
	}
	raw, _ := body.MarshalMsg(nil) // encoding into a fresh buffer cannot fail
	return CommandRecord{ID: inv.CommandID, WorkerID: w.ID(), Seq: inv.Seq, Kind: wire.KindRun, Body: raw,
		CreatedAt: now, InvocationID: inv.ID}, true
}

// fits reports whether a poll of w on queue may take inv: the queue
// matches the poll's queue or one of the worker's lanes (exactly, or as a
// prefix when the pattern ends in "*"), the runner kind is one the worker
// offers, and every required tag is on the worker.
func fits(w *worker, queue string, inv *InvocationRecord) bool {
	if !queueMatches(queue, inv.Queue) && !slices.ContainsFunc(w.rec.Queues, func(q string) bool { return queueMatches(q, inv.Queue) }) {
		return false
	}
	if r := inv.RunConfig.Runner; r != "" && !offersRunner(w.rec.Capabilities.Runners, r) {
		return false
	}
	for _, t := range inv.RequiredTags {
		if !hasTag(w.rec.Tags, t) {
			return false
		}
	}
	return true
}

func queueMatches(pattern, queue string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(queue, prefix)
	}
	return pattern == queue
}

// offersRunner compares kinds as wire.RunnerKind resolves them, so
// "subprocess" is the alias of "process" it is; a name that is no kind is
// compared as written.
func offersRunner(runners []string, kind string) bool {
	canon := func(k string) string {
		if c, ok := wire.RunnerKind(k); ok {
			return c
		}
		return k
	}
	return slices.ContainsFunc(runners, func(r string) bool { return canon(r) == canon(kind) })
}

// hasTag matches "k=v" exactly; a bare "k" matches any value of k.
func hasTag(tags []string, want string) bool {
	return slices.ContainsFunc(tags, func(t string) bool {
		if t == want {
			return true
		}
		k, _, _ := strings.Cut(t, "=")
		return !strings.Contains(want, "=") && k == want
	})
}

// replyPoll answers poll req of w with cmds, remembering them until the
// next reply with commands in case the host reports them Undelivered.
func (p *Plane) replyPoll(req RequestID, w *worker, cmds []CommandRecord) {
	out := make([]wire.Command, len(cmds))
	for i, c := range cmds {
		out[i] = wire.Command{ID: c.ID, Kind: c.Kind, Body: c.Body}
	}
	if len(cmds) > 0 {
		p.sent(w, req, cmds)
	}
	resp := wire.PollResponse{Commands: out, TargetNymphVersion: p.targetVersion(w)}
	if w.uses(wire.ExtConfig) && w.configSent < w.rec.ConfigGen {
		resp.Config = liveConfig(map[string]msgp.Raw{}, w)
		w.configSent = w.rec.ConfigGen
	}
	if len(cmds) > 0 && w.uses(wire.ExtCursor) {
		var last uint64
		for _, c := range cmds {
			last = max(last, c.Cursor)
		}
		resp.Cursor = wire.FormatCursor(last)
	}
	p.reply(req, StatusOK, resp)
}

// targetVersion is the version w should run, when it does not run it.
func (p *Plane) targetVersion(w *worker) *string {
	want := w.rec.TargetVersion
	if want == "" {
		want = p.cfg.TargetVersion
	}
	if want == "" || (w.rec.Versions.Daemon != nil && *w.rec.Versions.Daemon == want) {
		return nil
	}
	v := want // only a reply that names a version allocates it
	return &v
}

// wakeWorker answers w's parked poll if it now has something to deliver.
func (p *Plane) wakeWorker(w *worker, now time.Time) {
	if !w.hasPoll {
		return
	}
	pk := p.parked[w.poll]
	cmds := p.takeCommands(w, pk.queue, pk.full, now)
	if len(cmds) == 0 {
		return
	}
	req := w.poll
	p.unpark(req, now)
	p.replyPoll(req, w, cmds)
}

// answerParkedPoll answers w's parked poll at once with whatever it may
// take now, possibly nothing. It runs when w reported the end of an exec,
// a run or a setup: a slot freed, so the daemon may take more, and a daemon
// whose carrier cannot abandon a request in flight (a FIFO relay, a spool)
// waits for this answer before it polls again — were the poll left parked
// until its deadline, a finished exec would stall the daemon's loop for up
// to the poll cap. A daemon that did abandon the poll (direct HTTP) just
// gets an empty reply to a poll it no longer reads, or to its fresh one.
func (p *Plane) answerParkedPoll(w *worker, now time.Time) {
	if w == nil || !w.hasPoll {
		return
	}
	req := w.poll
	pk := p.parked[req]
	if pk == nil {
		w.hasPoll = false
		return
	}
	cmds := p.takeCommands(w, pk.queue, pk.full, now)
	p.unpark(req, now)
	p.replyPoll(req, w, cmds)
}

// wakeForRuns offers queued runs to parked polls, longest parked first.
func (p *Plane) wakeForRuns(now time.Time) {
	kept := p.pollOrder[:0]
	for _, o := range p.pollOrder {
		if !o.current() {
			continue
		}
		kept = append(kept, o)
		w := o.w
		if len(p.queued) == 0 || w.rec.State != WorkerActive {
			continue
		}
		if run, ok := p.takeRun(w, w.park.queue, now); ok {
			kept = kept[:len(kept)-1]
			p.unpark(o.req, now)
			p.replyPoll(o.req, w, []CommandRecord{run})
		}
	}
	clear(p.pollOrder[len(kept):])
	p.pollOrder = kept
}

// compactPollOrder drops answered polls from pollOrder.
func (p *Plane) compactPollOrder() {
	kept := p.pollOrder[:0]
	for _, o := range p.pollOrder {
		if o.current() {
			kept = append(kept, o)
		}
	}
	clear(p.pollOrder[len(kept):])
	p.pollOrder = kept
}

// unpark forgets a parked request, answered (or given up) at now. A poll's
// until becomes now if it is earlier: until is then how long its daemon
// was waiting on the plane, which silentSince and expireUnreported do not
// count as silence.
func (p *Plane) unpark(req RequestID, now time.Time) {
	pk := p.parked[req]
	if pk == nil {
		return
	}
	delete(p.parked, req)
	switch pk.kind {
	case parkPoll:
		if w := pk.w; w.hasPoll && w.poll == req {
			w.hasPoll = false
			if now.Before(w.park.until) {
				w.park.until = now
			}
		}
	case parkLogs:
		waits := slices.DeleteFunc(p.logWaits[pk.execID], func(r RequestID) bool { return r == req })
		if len(waits) == 0 {
			delete(p.logWaits, pk.execID)
		} else {
			p.logWaits[pk.execID] = waits
		}
	}
}

func (p *Plane) onGone(now time.Time, req RequestID) { p.unpark(req, now) }

// onDeadline answers a parked request whose time is up.
func (p *Plane) onDeadline(now time.Time, req RequestID) {
	pk := p.parked[req]
	if pk == nil {
		return
	}
	switch pk.kind {
	case parkPoll:
		w := pk.w
		cmds := p.takeCommands(w, pk.queue, pk.full, now)
		p.unpark(req, now)
		p.replyPoll(req, w, cmds)
	case parkLogs:
		p.unpark(req, now)
		p.replyLogs(req, p.execs[pk.execID], pk.offset)
	}
}

// onUndelivered puts the commands of a poll reply that never reached its
// daemon back at the front of the worker's queue, as if never sent, and
// offers them to the worker's next poll.
func (p *Plane) onUndelivered(now time.Time, e Undelivered) {
	w := p.sentBy[e.Req]
	if w == nil {
		return // a later reply went out since; too late to take this one back
	}
	sent := w.lastSent
	p.unsent(w)
	if w.uses(wire.ExtCursor) {
		// Its cursor never reached them: its next poll gets them again.
		p.wakeWorker(w, now)
		return
	}
	var back []CommandRecord
	for _, c := range sent {
		if p.takeBack(w, c) {
			back = append(back, c)
		}
	}
	w.pending = append(back, w.pending...)
	p.wakeWorker(w, now)
}

// sent makes req, which carried cmds to w, w's lastReply: the one an
// Undelivered can still take back.
func (p *Plane) sent(w *worker, req RequestID, cmds []CommandRecord) {
	p.unsent(w)
	w.lastReply, w.lastSent = req, cmds
	p.sentBy[req] = w
}

// unsent forgets w's lastReply.
func (p *Plane) unsent(w *worker) {
	if len(w.lastSent) > 0 && p.sentBy[w.lastReply] == w {
		delete(p.sentBy, w.lastReply)
	}
	w.lastReply, w.lastSent = 0, nil
}

// takeBack undoes the delivery of c; false when c is a run, which goes
// back to its queue rather than the worker's, or is no longer undoable.
func (p *Plane) takeBack(w *worker, c CommandRecord) bool {
	switch c.Kind {
	case wire.KindRun:
		inv := p.invocations[c.InvocationID]
		if inv == nil || inv.State != InvocationRunning || inv.CommandID != c.ID {
			return false
		}
		p.clearRunning(inv)
		inv.State, inv.WorkerID, inv.CommandID, inv.StartedAt = InvocationQueued, "", "", time.Time{}
		at, _ := slices.BinarySearchFunc(p.queued, inv.Seq, func(r *InvocationRecord, seq uint64) int {
			return cmp.Compare(r.Seq, seq)
		})
		p.queued = slices.Insert(p.queued, at, inv)
		p.putInvocation(inv)
		return false
	case wire.KindExec:
		ex := p.execs[c.ExecID]
		if ex == nil || ex.State != ExecDelivered {
			return false // its result is in: it did arrive
		}
		ex.State, ex.DeliveredAt = ExecQueued, time.Time{}
		w.openExec(ex.ExecID, false)
		p.putExec(ex)
	case wire.KindSetup:
		p.setupsDone(w, func(s SetupInFlight) bool { return s.CommandID != c.ID })
		if w.rec.State == WorkerActive {
			w.rec.State = WorkerSettingUp
		}
		p.putWorker(w)
	case wire.KindHibernate:
		if w.rec.State == WorkerHibernating {
			w.rec.State, w.rec.HibernateUntil = p.settledState(w), time.Time{}
			p.putWorker(w)
		}
	}
	p.putCommand(c)
	return true
}
