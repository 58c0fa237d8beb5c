package sim

import (
	"fmt"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

// opBit marks the RequestIDs of operator requests, which are answered
// within the step that makes them.
const opBit = 1 << 63

// planeSide is the plane's side: the plane machine, the requests it
// holds, the operator and the plane's outages.
type planeSide struct {
	side
	pcfg  plane.Config
	plane *plane.Plane
	down  bool
	// held are the requests the plane has open, by the slot index of
	// their id (the fleet hands out the ids).
	held []heldReq
	// workers is the worker id of each daemon as the operator knows it
	// ("" until its hello was answered, or once it exited).
	workers    []string
	arrivalGen uint64
	rate       float64
	opSeq      uint64
	met        metrics
}

// heldReq is a request the plane holds open.
type heldReq struct {
	id        plane.RequestID // 0 while the slot is free
	d         int32
	sentAt    int64
	wait      int64
	parkUntil int64 // while parked
}

// Advance steps the plane's events before bound.
func (p *planeSide) Advance(bound int64, max int) []Mail { return p.advance(bound, max, p.dispatch) }

// schedule queues the plane's share of the scenario: samples, ticks, the
// workload's arrivals and the network's outages and partitions.
func (p *planeSide) schedule() {
	sc := &p.w.sc
	p.q.push(event{at: int64(sc.SampleEvery), kind: evSample})
	p.q.push(event{at: int64(sc.TickEvery), kind: evTick})
	p.nextArrival()
	if sc.Workload.SetupRate > 0 {
		p.q.push(event{at: p.expAfter(sc.Workload.SetupRate), kind: evSetupArrival})
	}
	for _, b := range sc.Workload.Bursts {
		p.q.push(event{at: int64(b.At), kind: evRate})
		p.q.push(event{at: int64(b.At + b.For), kind: evRate})
	}
	for i, o := range sc.Network.Outages {
		p.q.push(event{at: int64(o.At), kind: evOutage, aux: uint8(i), ref: 1})
		p.q.push(event{at: int64(o.At + o.For), kind: evOutage, aux: uint8(i)})
	}
	for i, pt := range sc.Network.Partitions {
		p.q.push(event{at: int64(pt.At), kind: evPartition, aux: uint8(i), ref: 1})
		p.q.push(event{at: int64(pt.At + pt.For), kind: evPartition, aux: uint8(i)})
	}
	for i, h := range sc.Workload.Hibernates {
		p.q.push(event{at: int64(h.At), kind: evHibernate, aux: uint8(i)})
	}
}

// expAfter is now plus an exponential gap of a Poisson process of rate
// per second.
func (p *planeSide) expAfter(rate float64) int64 {
	return p.now + 1 + int64(p.rng.ExpFloat64()/rate*float64(time.Second))
}

func (p *planeSide) nextArrival() {
	p.arrivalGen++
	if p.rate > 0 {
		p.q.push(event{at: p.expAfter(p.rate), kind: evArrival, ref: p.arrivalGen})
	}
}

func (p *planeSide) dispatch(e event) {
	sc := &p.w.sc
	switch e.kind {
	case evMail:
		p.receive(p.take(e.ref))
	case evDeadline:
		if h := p.lookup(e.ref); h != nil && h.parkUntil == e.at && !p.down {
			p.step(plane.PollDeadline{Req: h.id})
		}
	case evArrival:
		if e.ref == p.arrivalGen {
			p.operatorExec()
			p.q.push(event{at: p.expAfter(p.rate), kind: evArrival, ref: p.arrivalGen})
		}
	case evSetupArrival:
		p.operatorSetup()
		p.q.push(event{at: p.expAfter(sc.Workload.SetupRate), kind: evSetupArrival})
	case evRate:
		p.rate = sc.Workload.ExecRate
		for _, b := range sc.Workload.Bursts {
			if p.now >= int64(b.At) && p.now < int64(b.At+b.For) {
				p.rate = b.Rate
			}
		}
		p.nextArrival()
	case evTick:
		if !p.down {
			p.step(plane.Tick{})
		}
		p.q.push(event{at: p.now + int64(sc.TickEvery), kind: evTick})
	case evSample:
		p.sample()
		p.q.push(event{at: p.now + int64(sc.SampleEvery), kind: evSample})
	case evOutage:
		p.outage(e.ref == 1)
	case evPartition:
		p.partition(int(e.aux), e.ref == 1)
	case evHibernate:
		p.hibernateWave(sc.Workload.Hibernates[e.aux])
	}
}

// receive is a daemon's request, or word about one, reaching the plane.
func (p *planeSide) receive(m Mail) {
	switch m.kind {
	case mRequest:
		if p.down {
			p.met.refused++
			p.mail(Mail{at: p.now + p.latency(), kind: mRefused, ref: m.ref})
			return
		}
		p.met.routes[m.route]++
		*p.hold(m.ref) = heldReq{id: plane.RequestID(m.ref), d: m.d, sentAt: m.t, wait: m.wait}
		if m.route == RoutePoll || m.route == RouteNotify {
			p.step(plane.Poll{Req: plane.RequestID(m.ref), Body: m.poll, Auth: bearer()})
		} else {
			p.step(m.body)
		}
	case mGone:
		if h := p.lookup(m.ref); h != nil && !p.down {
			*h = heldReq{}
			p.step(plane.Gone{Req: plane.RequestID(m.ref)})
			p.mail(Mail{at: p.now + p.w.look, kind: mGoneDone, ref: m.ref})
		}
	case mUndelivered:
		if !p.down {
			p.step(plane.Undelivered{Req: plane.RequestID(m.ref)})
		}
	case mWorker:
		p.workers[m.d] = m.key
	}
}

// hold is the slot of request ref, grown to fit. The fleet reuses a
// request's slot only once the plane said it is done with it, so a slot
// still held here is a bug in that bookkeeping, not something to
// overwrite.
func (p *planeSide) hold(ref uint64) *heldReq {
	i := int(uint32(ref))
	if i >= len(p.held) {
		p.held = append(p.held, make([]heldReq, i+1-len(p.held))...)
	}
	if h := &p.held[i]; h.id != 0 {
		panic(fmt.Sprintf("sim: request %#x arrived in the slot of %#x, still held", ref, uint64(h.id)))
	}
	return &p.held[i]
}

// lookup is request ref while the plane holds it, nil else.
func (p *planeSide) lookup(ref uint64) *heldReq {
	i := int(uint32(ref))
	if i >= len(p.held) || p.held[i].id == 0 || uint64(p.held[i].id) != ref {
		return nil
	}
	return &p.held[i]
}

// parkedPolls is what the plane holds open, none while it is down (its
// open requests were reset).
func (p *planeSide) parkedPolls() int {
	if p.down {
		return 0
	}
	return p.plane.Parked()
}

// ---------------------------------------------------------------- stepping

func (p *planeSide) step(ev plane.Event) {
	effs := p.plane.Step(p.t(), ev)
	// Operator replies first: an exec's acceptance reaches the fleet
	// before the poll reply that hands the exec out, even when both draw
	// the shortest latency.
	for _, eff := range effs {
		if rep, ok := eff.(plane.Reply); ok && uint64(rep.Req)&opBit != 0 {
			p.operatorReply(rep)
		}
	}
	for _, eff := range effs {
		switch e := eff.(type) {
		case plane.Reply:
			if uint64(e.Req)&opBit == 0 {
				p.answered(e)
			}
		case plane.Park:
			if h := p.lookup(uint64(e.Req)); h != nil {
				h.parkUntil = p.w.ns(e.Until)
				p.q.push(event{at: h.parkUntil, kind: evDeadline, ref: uint64(h.id)})
			}
		}
	}
}

// answered sends the plane's Reply to the daemon that asked.
func (p *planeSide) answered(rep plane.Reply) {
	h := p.lookup(uint64(rep.Req))
	if h == nil {
		return
	}
	held := *h
	*h = heldReq{}
	if cut, refuse := p.cut(held.d); (cut && !refuse) || p.lost() {
		p.met.lost++
		timeout := held.sentAt + p.w.timeoutAfter(held.wait)
		p.mail(Mail{at: max(p.now+p.w.look, timeout), kind: mLost, ref: uint64(held.id)})
		return
	}
	p.mail(Mail{at: p.now + p.latency(), kind: mReply, ref: uint64(held.id), rep: rep})
}

// ---------------------------------------------------------------- the operator

func (p *planeSide) opID() plane.RequestID {
	p.opSeq++
	return plane.RequestID(opBit | p.opSeq)
}

// pickWorker draws a daemon the operator knows a worker id of; a few
// misses (a fleet still booting, drained) give up.
func (p *planeSide) pickWorker() (string, bool) {
	for range 8 {
		if id := p.workers[p.rng.IntN(len(p.workers))]; id != "" {
			return id, true
		}
	}
	return "", false
}

func (p *planeSide) operatorExec() {
	id, ok := p.pickWorker()
	if !ok || p.down {
		p.met.opFailed++
		return
	}
	p.step(plane.EnqueueExec{WorkerID: id, Body: operator.ExecRequest{Command: "true"}}.Named(p.opID()))
}

func (p *planeSide) operatorSetup() {
	id, ok := p.pickWorker()
	if !ok || p.down {
		p.met.opFailed++
		return
	}
	p.step(plane.EnqueueSetup{WorkerID: id, Body: operator.SetupRequest{Script: "true"}}.Named(p.opID()))
}

func (p *planeSide) operatorReply(rep plane.Reply) {
	if !is2xx(rep.Status) {
		p.met.opFailed++
		return
	}
	if b, ok := rep.Body.(operator.ExecAccepted); ok {
		p.met.enqueued++
		p.mail(Mail{at: p.now + p.w.look, kind: mAccepted, key: b.ExecID, t: p.now})
	}
}

func (p *planeSide) hibernateWave(w Wave) {
	until := float64(p.w.at(p.now+int64(w.For)).UnixMilli()) / 1000
	for _, id := range p.workers {
		if p.rng.Float64() >= w.Fraction || p.down {
			continue
		}
		if id != "" {
			p.step(plane.EnqueueHibernate{WorkerID: id, Body: operator.HibernateRequest{UntilEpochS: until}}.Named(p.opID()))
		}
	}
}

// ---------------------------------------------------------------- faults

// outage takes the plane down or brings it back. Going down, every open
// request is dropped (the process went away: clients see a reset);
// coming back, the plane is rebuilt from what its store holds, as `nymph
// serve` restarts, which gives every worker a fresh health window.
func (p *planeSide) outage(start bool) {
	if !start {
		if np, err := plane.Restore(p.pcfg, p.plane.Snapshot(), p.t()); err == nil {
			p.plane = np
		}
		p.down = false
		return
	}
	p.down = true
	for i := range p.held {
		h := &p.held[i]
		if h.id == 0 {
			continue
		}
		p.mail(Mail{at: p.now + p.latency(), kind: mReset, ref: uint64(h.id)})
		*h = heldReq{}
	}
}
