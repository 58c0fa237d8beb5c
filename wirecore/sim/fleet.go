package sim

import (
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// fleet is the daemons' side: every machine, the requests they have out
// and the work they run.
type fleet struct {
	side
	nodes []node

	reqs    []request
	freeReq []uint32
	runs    []running
	freeRun []uint32

	// enqueuedAt is when the plane accepted each exec not yet started,
	// as its mAccepted told.
	enqueuedAt map[string]int64
	met        metrics
	progress   func(done, total time.Duration)
	// effects is the daemons' effect buffer (step), pollResp the poll
	// response a PollResult points to (feed).
	effects  []daemon.Effect
	pollResp wire.PollResponse
}

// request is one daemon request, from SendPoll (or another send) until
// the daemon was fed its answer and the plane is done with it. Slots are
// reused; the high half of the id is the slot's generation, so an event
// that outlived its request misses.
type request struct {
	id    plane.RequestID // 0 while the slot is free
	gen   uint32
	d     int32
	route Route
	// cut: the daemon withdrew the request (CancelPoll without
	// KeepReply); an answer that still comes is undelivered.
	cut        bool
	daemonDone bool
	// planeDone: the plane is done with it (or it never reached the
	// plane); until then it went to the plane and no word of its end
	// came back.
	planeDone bool
	seq       uint64 // a poll's Seq
	key       string // a post's exec or invocation id
	arriveAt  int64  // when the plane gets it, if it does
	wait      int64  // what the client asked the plane to wait (a poll's timeout_s)
	reply     plane.Reply
	err       error
}

// running is an exec or setup a daemon is carrying out.
type running struct {
	gen       uint32
	d         int32 // -1 while the slot is free
	id        string
	setup     bool
	cancelled bool
	started   int64
}

// Advance steps the fleet's events before bound.
func (f *fleet) Advance(bound int64, max int) []Mail { return f.advance(bound, max, f.dispatch) }

// schedule queues the fleet's share of the scenario: boots, samples,
// partitions and drains.
func (f *fleet) schedule() {
	sc := &f.w.sc
	for i := range f.nodes {
		at := int64(0)
		if sc.BootSpread > 0 {
			at = f.rng.Int64N(int64(sc.BootSpread))
		}
		f.q.push(event{at: at, kind: evBoot, d: int32(i)})
	}
	f.q.push(event{at: int64(sc.SampleEvery), kind: evSample})
	for i, p := range sc.Network.Partitions {
		f.q.push(event{at: int64(p.At), kind: evPartition, aux: uint8(i), ref: 1})
		f.q.push(event{at: int64(p.At + p.For), kind: evPartition, aux: uint8(i)})
	}
	for i, h := range sc.Workload.Drains {
		f.q.push(event{at: int64(h.At), kind: evDrain, aux: uint8(i)})
	}
}

func (f *fleet) dispatch(e event) {
	switch e.kind {
	case evBoot:
		f.step(e.d, daemon.Boot{})
	case evTimer:
		n := &f.nodes[e.d]
		bit := uint8(1) << e.aux
		if n.armed&bit == 0 || n.timers[e.aux] != int64(e.ref) {
			return // cancelled or re-armed since
		}
		n.armed &^= bit
		f.step(e.d, daemon.TimerFired{ID: timerID(e.aux), At: f.w.at(int64(e.ref))})
	case evFeed, evTimeout:
		if r := f.lookup(e.ref); r != nil && !r.daemonDone {
			if e.kind == evTimeout {
				r.err = errTimeout
			}
			f.feed(r)
		}
	case evExecDone, evSetupDone:
		f.workDone(e)
	case evSample:
		f.sample()
		f.q.push(event{at: f.now + int64(f.w.sc.SampleEvery), kind: evSample})
		if f.progress != nil {
			f.progress(time.Duration(f.now), f.w.sc.Duration)
		}
	case evPartition:
		f.partition(int(e.aux), e.ref == 1)
	case evDrain:
		f.drainWave(f.w.sc.Workload.Drains[e.aux])
	case evMail:
		f.receive(f.take(e.ref))
	}
}

// receive is the plane's word on a request (or an accepted exec).
func (f *fleet) receive(m Mail) {
	if m.kind == mAccepted {
		f.enqueuedAt[m.key] = m.t
		return
	}
	r := f.lookup(m.ref)
	if r == nil {
		return
	}
	r.planeDone = true
	switch m.kind {
	case mReply:
		r.reply = m.rep
		f.delivered(r)
		return
	case mRefused:
		r.err = errRefused
	case mReset:
		if !r.cut {
			r.err = errReset
		}
	case mLost:
		r.err = errTimeout
	}
	if r.daemonDone || r.cut {
		f.release(r)
		return
	}
	if m.kind != mGoneDone {
		f.feed(r)
	}
}

// partition puts partition i in force or lifts it. A loud one resets the
// open requests of the daemons it cuts off; a silent one lets them wait.
func (f *fleet) partition(i int, start bool) {
	f.side.partition(i, start)
	if !start || !f.w.sc.Network.Partitions[i].Refuse {
		return
	}
	for j := range f.reqs {
		r := &f.reqs[j]
		if r.id == 0 || r.daemonDone || r.cut {
			continue
		}
		if cut, _ := f.cut(r.d); cut {
			r.cut, r.err = true, errReset
			f.q.push(event{at: f.now, kind: evFeed, ref: uint64(r.id)})
		}
	}
}

func (f *fleet) drainWave(w Wave) {
	for d := range f.nodes {
		if f.rng.Float64() < w.Fraction {
			f.step(int32(d), daemon.Signal{Kind: daemon.SignalTerm})
		}
	}
}

// ---------------------------------------------------------------- requests

func (f *fleet) lookup(ref uint64) *request {
	i := uint32(ref)
	if int(i) >= len(f.reqs) {
		return nil
	}
	r := &f.reqs[i]
	if r.id == 0 || uint64(r.id) != ref {
		return nil
	}
	return r
}

// open takes a slot for a request of daemon d.
func (f *fleet) open(d int32, rt Route, wait int64) *request {
	i := slot(&f.reqs, &f.freeReq)
	r := &f.reqs[i]
	gen := r.gen + 1
	*r = request{gen: gen, id: plane.RequestID(uint64(gen)<<32 | uint64(i))}
	r.d, r.route, r.wait = d, rt, wait
	return r
}

// release frees r's slot once neither end needs it.
func (f *fleet) release(r *request) {
	if !r.daemonDone || !r.planeDone {
		return
	}
	gen := r.gen
	i := uint32(r.id)
	*r = request{gen: gen}
	f.freeReq = append(f.freeReq, i)
}

// send puts daemon request r on the network. m holds its body only: a
// plane.Event built with r's id in body (so the plane is stepped with it
// as it is, not a renamed copy), or a poll's request in poll; the rest
// of the mail is r's.
func (f *fleet) send(r *request, m Mail) {
	cut, refuse := f.cut(r.d)
	switch {
	case refuse:
		f.met.refused++
		r.planeDone, r.err = true, errRefused
		f.q.push(event{at: f.now + f.latency(), kind: evFeed, ref: uint64(r.id)})
	case cut || f.lost():
		f.met.lost++
		r.planeDone = true
		f.q.push(event{at: f.now + f.w.timeoutAfter(r.wait), kind: evTimeout, ref: uint64(r.id)})
	default:
		r.arriveAt = f.now + f.latency()
		m.at, m.kind, m.ref, m.d, m.route, m.t, m.wait = r.arriveAt, mRequest, uint64(r.id), r.d, r.route, f.now, r.wait
		f.mail(m)
	}
}

// delivered: the answer reached the daemon's end of the connection.
func (f *fleet) delivered(r *request) {
	if r.cut || r.daemonDone {
		// Nobody reads it: the commands in it go back to the worker's
		// queue, and a withdrawn poll was fed its cancellation already.
		if r.reply.CarriesCommands() {
			f.mail(Mail{at: f.now + f.latency(), kind: mUndelivered, ref: uint64(r.id)})
		}
		r.reply = plane.Reply{}
		r.daemonDone = true
		f.release(r)
		return
	}
	f.feed(r)
}

// feed gives the daemon the outcome of r (its reply, or r.err) as a
// driver builds it from an HTTP response: the decoded body on a 2xx, the
// raw body else. Each event is stepped as built: returned as a
// daemon.Event, it would be boxed on the heap, once per answer.
func (f *fleet) feed(r *request) {
	r.daemonDone = true
	d, route, seq, key, rep, err := r.d, r.route, r.seq, r.key, r.reply, r.err
	f.release(r)
	var raw []byte
	if err == nil && !is2xx(rep.Status) {
		raw, _ = plane.AppendMsgpack(nil, rep.Body) // what the wire carries
	}
	retryAfter := time.Duration(rep.RetryAfterS) * time.Second
	switch route {
	case RouteHello:
		res := daemon.HelloResult{Err: err}
		if err == nil {
			res = daemon.HelloResult{Status: rep.Status, Body: raw, RetryAfter: retryAfter}
			if body, ok := rep.Body.(wire.HelloResponse); ok {
				res.Response = &body
			}
		}
		f.step(d, res)
		// The worker id the daemon took, by its own rule, for the
		// operator to address.
		n := &f.nodes[d]
		if id := n.m.Status().WorkerID; id != n.worker && n.state != stExited {
			n.worker = id
			f.mail(Mail{at: f.now + f.w.look, kind: mWorker, d: d, key: id})
		}
	case RoutePoll:
		f.nodes[d].polls.drop(seq)
		res := daemon.PollResult{Seq: seq, Err: err}
		if err == nil {
			res = daemon.PollResult{Seq: seq, Status: rep.Status, Body: raw, RetryAfter: retryAfter}
			if body, ok := rep.Body.(wire.PollResponse); ok {
				// The machine reads the response within its step and
				// keeps no hold of it, so one scratch copy serves every
				// poll.
				f.pollResp = body
				res.Response = &f.pollResp
			}
		}
		f.step(d, res)
	case RouteResult:
		f.step(d, daemon.ResultPosted{ExecID: key, Status: rep.Status, Err: err})
	case RouteAck:
		f.step(d, daemon.AckPosted{InvocationID: key, Status: rep.Status, Err: err})
	case RouteNotify:
		f.step(d, daemon.DrainNoticed{})
	}
}

func is2xx(status int) bool { return status >= 200 && status <= 299 }

// bearer is every daemon request's credentials: the sim's plane takes
// the shared bearer (signatures cost CPU the sim does not model).
func bearer() plane.Auth { return plane.Auth{Bearer: true} }

// ---------------------------------------------------------------- stepping

func (f *fleet) step(d int32, ev daemon.Event) {
	n := &f.nodes[d]
	if n.state == stExited {
		return
	}
	// One effect buffer for the whole fleet (StepInto), taken while in
	// use so a nested step would get its own.
	effs := n.m.StepInto(f.effects[:0], f.t(), ev)
	f.effects = nil
	for _, eff := range effs {
		f.apply(d, n, eff)
	}
	clear(effs)
	f.effects = effs[:0]
}

func (f *fleet) apply(d int32, n *node, eff daemon.Effect) {
	switch e := eff.(type) {
	case daemon.SendHello:
		r := f.open(d, RouteHello, 0)
		f.send(r, Mail{body: plane.Hello{Req: r.id, Body: e.Request, Auth: bearer()}})
	case daemon.SendPoll:
		r := f.open(d, RoutePoll, int64(float64(e.Request.TimeoutS)*float64(time.Second)))
		r.seq = e.Seq
		n.polls.add(pollRef{seq: e.Seq, req: r.id})
		f.send(r, Mail{poll: e.Request})
	case daemon.CancelPoll:
		f.cancelPoll(n, e)
	case daemon.NotifyDraining:
		r := f.open(d, RouteNotify, 0)
		f.send(r, Mail{poll: e.Request})
	case daemon.PostExecResult:
		r := f.open(d, RouteResult, 0)
		r.key = e.ExecID
		f.send(r, Mail{body: plane.ExecResult{Req: r.id, ExecID: e.ExecID, Body: e.Result, Auth: bearer()}})
	case daemon.PostAck:
		r := f.open(d, RouteAck, 0)
		r.key = e.Ack.InvocationID
		f.send(r, Mail{body: plane.Ack{Req: r.id, Body: e.Ack, Auth: bearer()}})
	case daemon.StartExec:
		if at, ok := f.enqueuedAt[e.Exec.ExecID]; ok {
			delete(f.enqueuedAt, e.Exec.ExecID)
			f.met.latencies = append(f.met.latencies, f.now-at)
		}
		f.met.started++
		f.start(d, e.Exec.ExecID, evExecDone, f.w.sc.Workload.ExecDuration)
	case daemon.StartSetup:
		f.start(d, e.CommandID, evSetupDone, f.w.sc.Workload.SetupDuration)
	case daemon.CancelInFlight:
		f.cancelWork(d, "")
	case daemon.CancelWork:
		if e.ExecID != "" {
			f.cancelWork(d, e.ExecID)
		}
	case daemon.SetTimer:
		i := daemon.TimerIndex(e.ID)
		at := f.w.ns(e.At)
		n.timers[i], n.armed = at, n.armed|1<<i
		f.q.push(event{at: at, kind: evTimer, d: d, aux: uint8(i), ref: uint64(at)})
		if e.ID == daemon.TimerBackoff {
			n.backoffWait = at - f.now
		}
	case daemon.CancelTimer:
		n.armed &^= 1 << daemon.TimerIndex(e.ID)
	case daemon.ReportState:
		n.state = stateCode(e.State)
	case daemon.Exit:
		n.state = stExited
		f.met.exits++
		if n.worker != "" {
			f.mail(Mail{at: f.now + f.w.look, kind: mWorker, d: d})
		}
	}
	// Runs, refreshes, updates and key rotations are not part of the
	// workload; logs and delivery records have nowhere to go.
}

func (f *fleet) cancelPoll(n *node, e daemon.CancelPoll) {
	if e.KeepReply {
		return // the request runs on; the plane answers it when the next poll overtakes it
	}
	r := f.lookup(uint64(n.polls.find(e.Seq)))
	if r == nil {
		return
	}
	r.cut, r.err = true, errCancelled
	f.q.push(event{at: f.now, kind: evFeed, ref: uint64(r.id)})
	if !r.planeDone {
		// The close follows the request on its connection: the plane
		// hears it after the request itself.
		f.mail(Mail{at: max(f.now+f.latency(), r.arriveAt), kind: mGone, ref: uint64(r.id)})
	}
}

// ---------------------------------------------------------------- work

func (f *fleet) start(d int32, id string, k kind, dur Dist) {
	i := slot(&f.runs, &f.freeRun)
	w := &f.runs[i]
	w.gen++
	w.d, w.id, w.setup, w.cancelled, w.started = d, id, k == evSetupDone, false, f.now
	f.q.push(event{at: f.now + max(0, dur.draw(f.rng)), kind: k, ref: uint64(w.gen)<<32 | uint64(i)})
}

// cancelWork ends daemon d's running work (or only exec id) at once, as
// killed: its pending end event goes stale with the new generation.
func (f *fleet) cancelWork(d int32, id string) {
	for i := range f.runs {
		w := &f.runs[i]
		if w.d != d || w.cancelled || (id != "" && w.id != id) {
			continue
		}
		w.gen++
		w.cancelled = true
		k := evExecDone
		if w.setup {
			k = evSetupDone
		}
		f.q.push(event{at: f.now, kind: k, ref: uint64(w.gen)<<32 | uint64(i)})
	}
}

func (f *fleet) workDone(e event) {
	i := uint32(e.ref)
	if int(i) >= len(f.runs) {
		return
	}
	w := &f.runs[i]
	if w.d < 0 || uint64(w.gen) != e.ref>>32 {
		return
	}
	d, id, cancelled, took := w.d, w.id, w.cancelled, f.now-w.started
	w.d, w.id = -1, ""
	f.freeRun = append(f.freeRun, i)
	if e.kind == evSetupDone {
		f.step(d, daemon.SetupFinished{CommandID: id, Killed: cancelled})
		return
	}
	res := wire.ExecResult{DurationMS: wire.Int(took / int64(time.Millisecond))}
	if cancelled {
		res.ExitCode = -1
	} else {
		f.met.completed++
	}
	f.step(d, daemon.ExecFinished{ExecID: id, Result: res})
}
