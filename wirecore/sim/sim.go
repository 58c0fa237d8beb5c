package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// epochUnix is virtual time zero, 2026-01-01 UTC: a fixed date, so that
// ids and hibernate deadlines (absolute epoch seconds on the wire) are
// the same on every run.
const epochUnix = 1767225600

// netError is what a client sees when the network or the plane fails it.
// The texts are what the real transports report, so the daemons log the
// same.
type netError string

func (e netError) Error() string { return string(e) }

const (
	errRefused   = netError("connect: connection refused")
	errReset     = netError("read: connection reset by peer")
	errTimeout   = netError("context deadline exceeded (Client.Timeout exceeded while awaiting headers)")
	errCancelled = netError("context canceled")
)

// Route is a daemon request's kind, as Summary.Requests counts them.
type Route uint8

// The routes; RouteCount is their number.
const (
	RouteHello Route = iota
	RoutePoll
	RouteResult
	RouteAck
	RouteNotify // a draining poll on the control lane: its end is all the daemon hears
	RouteCount
)

// opBit marks the RequestIDs of operator requests, which are answered
// within the step that makes them and never enter the request slab.
const opBit = 1 << 63

// request is one daemon request, from SendPoll (or another send) until
// both ends are done with it: the daemon was fed its answer and the plane
// answered it or forgot it. Slots are reused; the high half of the id is
// the slot's generation, so an event that outlived its request misses.
type request struct {
	id    plane.RequestID // 0 while the slot is free
	gen   uint32
	d     int32
	route Route
	// cut: the daemon withdrew the request (CancelPoll without
	// KeepReply); an answer that still comes is undelivered.
	cut        bool
	atPlane    bool // the plane holds it open
	daemonDone bool
	planeDone  bool
	seq        uint64 // a poll's Seq
	key        string // a post's exec or invocation id
	sentAt     int64
	wait       int64       // what the client asked the plane to wait (a poll's timeout_s)
	parkUntil  int64       // while parked at the plane
	body       plane.Event // the request as the plane is stepped with it
	reply      plane.Reply
	err        error
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

// node is one daemon: its machine and what its driver would hold.
type node struct {
	m      *daemon.Machine
	worker string
	polls  pollSet // polls in flight, by Seq
	timers [timerCount]int64
	armed  uint8 // bit i: timers[i] is armed
	state  uint8
	// backoffWait is the length of the backoff the daemon waits out.
	backoffWait int64
}

type pollRef struct {
	seq uint64
	req plane.RequestID
}

// pollSet holds a daemon's polls in flight: rarely more than two (the
// parked one and one a wake sent past it), so they sit in the node
// itself, one cache line with it, and only more spill to a slice.
type pollSet struct {
	n     uint8
	in    [2]pollRef
	spill []pollRef
}

func (p *pollSet) add(r pollRef) {
	if int(p.n) < len(p.in) {
		p.in[p.n] = r
		p.n++
		return
	}
	p.spill = append(p.spill, r)
}

// find is the request of poll seq, 0 when it is not in flight.
func (p *pollSet) find(seq uint64) plane.RequestID {
	for _, r := range p.in[:p.n] {
		if r.seq == seq {
			return r.req
		}
	}
	for _, r := range p.spill {
		if r.seq == seq {
			return r.req
		}
	}
	return 0
}

func (p *pollSet) drop(seq uint64) {
	for i := range p.in[:p.n] {
		if p.in[i].seq != seq {
			continue
		}
		copy(p.in[i:p.n], p.in[i+1:p.n])
		p.n--
		if len(p.spill) > 0 { // refill from the spill, oldest first
			p.in[p.n] = p.spill[0]
			p.n++
			p.spill = append(p.spill[:0], p.spill[1:]...)
		}
		return
	}
	for i, r := range p.spill {
		if r.seq == seq {
			p.spill = append(p.spill[:i], p.spill[i+1:]...)
			return
		}
	}
}

const timerCount = len(daemon.Timers)

func timerID(i uint8) daemon.TimerID { return daemon.Timers[i] }

// timerIndex is id's slot; a timer the daemon does not list is a bug in
// its list, not something to drop.
func timerIndex(id daemon.TimerID) int {
	i := slices.Index(daemon.Timers[:], id)
	if i < 0 {
		panic(fmt.Sprintf("sim: timer %q is not in daemon.Timers", id))
	}
	return i
}

// Daemon states as small numbers, for the per-state counts.
const (
	stBooting uint8 = iota
	stHello
	stPolling
	stBackoff
	stHibernating
	stDraining
	stUpdating
	stExited
	stCount
)

func stateCode(s string) uint8 {
	switch s {
	case daemon.StateHello:
		return stHello
	case daemon.StatePolling:
		return stPolling
	case daemon.StateBackoff:
		return stBackoff
	case daemon.StateHibernating:
		return stHibernating
	case daemon.StateDraining:
		return stDraining
	case daemon.StateUpdating:
		return stUpdating
	case daemon.StateExiting:
		return stExited
	}
	return stBooting
}

// noJitter is the daemons' Rand with the backoff jitter turned off: the
// worker-id entropy still comes from the seeded source.
type noJitter struct{ r *rand.Rand }

func (noJitter) Float64() float64   { return 0 }
func (n noJitter) Uint64() uint64   { return n.r.Uint64() }
func (s *Sim) t() time.Time         { return s.epoch.Add(time.Duration(s.now)) }
func (s *Sim) ns(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// Sim is one run in progress. Build it with New and drive it with Run.
type Sim struct {
	sc     Scenario
	epoch  time.Time
	rng    *rand.Rand // the network and the workload
	drng   *rand.Rand // the daemons' jitter and ids
	pcfg   plane.Config
	plane  *plane.Plane
	nodes  []node
	q      queue
	now    int64
	end    int64
	events uint64

	reqs    []request
	freeReq []uint32
	runs    []running
	freeRun []uint32

	planeDown bool
	// parts are the partitions in force, by index into the scenario's.
	parts      []int
	arrivalGen uint64
	rate       float64
	opSeq      uint64
	enqueuedAt map[string]int64

	met metrics
	// effects is the daemons' effect buffer (stepDaemon), pollResp the
	// poll response a PollResult points to (outcome).
	effects  []daemon.Effect
	pollResp wire.PollResponse
}

// New checks the scenario and builds the fleet, nothing stepped yet.
func New(sc Scenario) (*Sim, error) {
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s := &Sim{
		sc:         sc,
		epoch:      time.Unix(epochUnix, 0).UTC(),
		rng:        rand.New(rand.NewPCG(sc.Seed, 0x6e796d7068)),
		drng:       rand.New(rand.NewPCG(sc.Seed, 0x6461656d6f6e)),
		end:        int64(sc.Duration),
		rate:       sc.Workload.ExecRate,
		enqueuedAt: map[string]int64{},
	}
	var key [32]byte
	for i := range 8 {
		key[i] = byte(sc.Seed >> (8 * i))
	}
	s.pcfg = plane.Config{
		Entropy:    rand.NewChaCha8(key),
		PollCap:    sc.Plane.PollCap,
		Retain:     sc.Plane.Retain,
		MaxWorkers: sc.Daemons,
	}
	s.plane = plane.New(s.pcfg)

	var drand daemon.Rand = s.drng
	if sc.Daemon.NoJitter {
		drand = noJitter{s.drng}
	}
	cfg := daemon.DefaultConfig()
	cfg.Workdir = "/var/lib/nymph"
	cfg.DaemonVersion = "sim"
	cfg.WaitMaxS = sc.Daemon.WaitMax.Seconds()
	cfg.RetryMinS = sc.Daemon.RetryMin.Seconds()
	cfg.RetryMaxS = sc.Daemon.RetryMax.Seconds()
	cfg.MaxInvocations = sc.Daemon.MaxInvocations
	cfg.GraceS = sc.Daemon.Grace.Seconds()
	if !sc.Daemon.PlainProtocol {
		cfg.Extensions = wire.KnownExtensions[:]
	}
	s.nodes = make([]node, sc.Daemons)
	for i := range s.nodes {
		c := cfg
		c.MachineID = fmt.Sprintf("sim-%07d", i)
		c.Hostname = c.MachineID
		s.nodes[i].m = daemon.New(c, drand)
		at := int64(0)
		if sc.BootSpread > 0 {
			at = s.rng.Int64N(int64(sc.BootSpread))
		}
		s.q.push(event{at: at, kind: evBoot, d: int32(i)})
	}
	s.schedule()
	return s, nil
}

// schedule queues the scenario's own events: samples, ticks, the
// workload's arrivals and the network's outages and partitions.
func (s *Sim) schedule() {
	sc := s.sc
	s.q.push(event{at: int64(sc.SampleEvery), kind: evSample})
	s.q.push(event{at: int64(sc.TickEvery), kind: evTick})
	s.nextArrival()
	if sc.Workload.SetupRate > 0 {
		s.q.push(event{at: s.expAfter(sc.Workload.SetupRate), kind: evSetupArrival})
	}
	for _, b := range sc.Workload.Bursts {
		s.q.push(event{at: int64(b.At), kind: evRate})
		s.q.push(event{at: int64(b.At + b.For), kind: evRate})
	}
	for i, o := range sc.Network.Outages {
		s.q.push(event{at: int64(o.At), kind: evOutage, aux: uint8(i), ref: 1})
		s.q.push(event{at: int64(o.At + o.For), kind: evOutage, aux: uint8(i)})
	}
	for i, p := range sc.Network.Partitions {
		s.q.push(event{at: int64(p.At), kind: evPartition, aux: uint8(i), ref: 1})
		s.q.push(event{at: int64(p.At + p.For), kind: evPartition, aux: uint8(i)})
	}
	for i, h := range sc.Workload.Hibernates {
		s.q.push(event{at: int64(h.At), kind: evHibernate, aux: uint8(i)})
	}
	for i, h := range sc.Workload.Drains {
		s.q.push(event{at: int64(h.At), kind: evDrain, aux: uint8(i)})
	}
}

// expAfter is now plus an exponential gap of a Poisson process of rate
// per second.
func (s *Sim) expAfter(rate float64) int64 {
	return s.now + 1 + int64(s.rng.ExpFloat64()/rate*float64(time.Second))
}

func (s *Sim) nextArrival() {
	s.arrivalGen++
	if s.rate > 0 {
		s.q.push(event{at: s.expAfter(s.rate), kind: evArrival, ref: s.arrivalGen})
	}
}

// Run steps the simulation to its end and returns what it measured.
// progress, when not nil, is called after every sample with the virtual
// time reached.
func (s *Sim) Run(progress func(done, total time.Duration)) Result {
	for s.q.len() > 0 && s.q.peek().at <= s.end {
		e := s.q.pop()
		s.now = e.at
		s.events++
		s.dispatch(e)
		if e.kind == evSample && progress != nil {
			progress(time.Duration(s.now), s.sc.Duration)
		}
	}
	return s.result()
}

func (s *Sim) dispatch(e event) {
	switch e.kind {
	case evBoot:
		s.stepDaemon(e.d, daemon.Boot{})
	case evTimer:
		n := &s.nodes[e.d]
		bit := uint8(1) << e.aux
		if n.armed&bit == 0 || n.timers[e.aux] != int64(e.ref) {
			return // cancelled or re-armed since
		}
		n.armed &^= bit
		s.stepDaemon(e.d, daemon.TimerFired{ID: timerID(e.aux), At: s.epoch.Add(time.Duration(e.ref))})
	case evArrive:
		if r := s.lookup(e.ref); r != nil {
			s.arrive(r)
		}
	case evReply:
		if r := s.lookup(e.ref); r != nil {
			s.delivered(r)
		}
	case evFeed, evTimeout:
		if r := s.lookup(e.ref); r != nil && !r.daemonDone {
			if e.kind == evTimeout {
				r.err = errTimeout
			}
			s.feed(r)
		}
	case evDeadline:
		if r := s.lookup(e.ref); r != nil && r.atPlane && r.parkUntil == e.at && !s.planeDown {
			s.stepPlane(plane.PollDeadline{Req: r.id})
		}
	case evGone:
		if r := s.lookup(e.ref); r != nil && r.atPlane && !s.planeDown {
			s.forget(r)
			s.stepPlane(plane.Gone{Req: r.id})
			s.release(r)
		}
	case evUndelivered:
		if !s.planeDown {
			s.stepPlane(plane.Undelivered{Req: plane.RequestID(e.ref)})
		}
	case evExecDone, evSetupDone:
		s.workDone(e)
	case evArrival:
		if e.ref == s.arrivalGen {
			s.operatorExec()
			s.q.push(event{at: s.expAfter(s.rate), kind: evArrival, ref: s.arrivalGen})
		}
	case evSetupArrival:
		s.operatorSetup()
		s.q.push(event{at: s.expAfter(s.sc.Workload.SetupRate), kind: evSetupArrival})
	case evRate:
		s.rate = s.sc.Workload.ExecRate
		for _, b := range s.sc.Workload.Bursts {
			if s.now >= int64(b.At) && s.now < int64(b.At+b.For) {
				s.rate = b.Rate
			}
		}
		s.nextArrival()
	case evTick:
		if !s.planeDown {
			s.stepPlane(plane.Tick{})
		}
		s.q.push(event{at: s.now + int64(s.sc.TickEvery), kind: evTick})
	case evSample:
		s.sample()
		s.q.push(event{at: s.now + int64(s.sc.SampleEvery), kind: evSample})
	case evOutage:
		s.outage(e.ref == 1)
	case evPartition:
		s.partition(int(e.aux), e.ref == 1)
	case evHibernate:
		s.hibernateWave(s.sc.Workload.Hibernates[e.aux])
	case evDrain:
		s.drainWave(s.sc.Workload.Drains[e.aux])
	}
}

// ---------------------------------------------------------------- requests

func (s *Sim) lookup(ref uint64) *request {
	i := uint32(ref)
	if int(i) >= len(s.reqs) {
		return nil
	}
	r := &s.reqs[i]
	if r.id == 0 || uint64(r.id) != ref {
		return nil
	}
	return r
}

func (s *Sim) alloc() *request {
	i := slot(&s.reqs, &s.freeReq)
	r := &s.reqs[i]
	gen := r.gen + 1
	*r = request{gen: gen, id: plane.RequestID(uint64(gen)<<32 | uint64(i))}
	return r
}

// release frees r's slot once neither end needs it.
func (s *Sim) release(r *request) {
	if !r.daemonDone || !r.planeDone {
		return
	}
	gen := r.gen
	i := uint32(r.id)
	*r = request{gen: gen}
	s.freeReq = append(s.freeReq, i)
}

func (s *Sim) latency() int64 { return max(1, s.sc.Network.Latency.draw(s.rng)) }

func (s *Sim) lost() bool {
	return s.sc.Network.Loss > 0 && s.rng.Float64() < s.sc.Network.Loss
}

// cut reports whether a partition in force holds daemon d, and whether
// that partition refuses rather than drops.
func (s *Sim) cut(d int32) (cut, refuse bool) {
	for _, i := range s.parts {
		p := s.sc.Network.Partitions[i]
		if float64(d) < p.Fraction*float64(len(s.nodes)) {
			cut = true
			refuse = refuse || p.Refuse
		}
	}
	return cut, refuse
}

// open takes a slot for a request of daemon d; its body, built with the
// slot's id (so the plane is stepped with it as it is, not a renamed
// copy), goes in before send.
func (s *Sim) open(d int32, rt Route, wait int64) *request {
	r := s.alloc()
	r.d, r.route, r.sentAt, r.wait = d, rt, s.now, wait
	return r
}

// send puts a daemon's request on the network.
func (s *Sim) send(r *request) {
	cut, refuse := s.cut(r.d)
	switch {
	case refuse:
		s.met.refused++
		r.planeDone, r.body, r.err = true, nil, errRefused
		s.q.push(event{at: s.now + s.latency(), kind: evFeed, ref: uint64(r.id)})
	case cut || s.lost():
		s.met.lost++
		r.planeDone, r.body = true, nil
		s.q.push(event{at: s.now + r.wait + int64(s.sc.Network.Timeout), kind: evTimeout, ref: uint64(r.id)})
	default:
		s.q.push(event{at: s.now + s.latency(), kind: evArrive, ref: uint64(r.id)})
	}
}

// arrive hands a request that reached the plane's address to the plane.
func (s *Sim) arrive(r *request) {
	if s.planeDown {
		s.met.refused++
		r.planeDone, r.body, r.err = true, nil, errRefused
		s.q.push(event{at: s.now + s.latency(), kind: evFeed, ref: uint64(r.id)})
		return
	}
	s.met.routes[r.route]++
	r.atPlane = true
	body := r.body
	r.body = nil
	s.stepPlane(body)
}

// parkedPolls is what the plane holds open, none while it is down (its
// open requests were reset).
func (s *Sim) parkedPolls() int {
	if s.planeDown {
		return 0
	}
	return s.plane.Parked()
}

// forget marks r no longer open at the plane.
func (s *Sim) forget(r *request) {
	r.parkUntil = 0
	r.atPlane, r.planeDone = false, true
}

// answered is the plane's Reply to daemon request r.
func (s *Sim) answered(r *request, rep plane.Reply) {
	s.forget(r)
	if r.daemonDone || r.cut {
		// The client is gone: the reply cannot be written.
		if rep.CarriesCommands() {
			s.q.push(event{at: s.now, kind: evUndelivered, ref: uint64(r.id)})
		}
		s.release(r)
		return
	}
	if cut, refuse := s.cut(r.d); (cut && !refuse) || s.lost() {
		s.met.lost++
		s.q.push(event{at: max(s.now, r.sentAt+r.wait+int64(s.sc.Network.Timeout)), kind: evTimeout, ref: uint64(r.id)})
		return
	}
	r.reply = rep
	s.q.push(event{at: s.now + s.latency(), kind: evReply, ref: uint64(r.id)})
}

// delivered: the answer reached the daemon.
func (s *Sim) delivered(r *request) {
	if r.cut {
		// Withdrawn: the connection was cut, so the commands in it go
		// back to the worker's queue, and the daemon is fed the
		// cancellation if it has not been yet.
		if r.reply.CarriesCommands() {
			s.q.push(event{at: s.now + s.latency(), kind: evUndelivered, ref: uint64(r.id)})
		}
		r.reply = plane.Reply{}
	}
	if r.daemonDone {
		s.release(r)
		return
	}
	s.feed(r)
}

// feed gives the daemon the outcome of r (its reply, or r.err).
func (s *Sim) feed(r *request) {
	r.daemonDone = true
	d, hello := r.d, r.route == RouteHello
	ev := s.outcome(r)
	s.release(r)
	if ev != nil {
		s.stepDaemon(d, ev)
	}
	if hello {
		// The worker id the daemon took, by its own rule, for the
		// operator to address.
		n := &s.nodes[d]
		n.worker = n.m.Status().WorkerID
	}
}

func (s *Sim) dropPoll(n *node, seq uint64) {
	n.polls.drop(seq)
}

// outcome is the daemon event that answers r, as a driver builds it
// from an HTTP response: the decoded body on a 2xx, the raw body else.
func (s *Sim) outcome(r *request) daemon.Event {
	rep, err := r.reply, r.err
	var raw []byte
	if err == nil && !is2xx(rep.Status) {
		raw, _ = plane.AppendMsgpack(nil, rep.Body) // what the wire carries
	}
	retryAfter := time.Duration(rep.RetryAfterS) * time.Second
	switch r.route {
	case RouteHello:
		if err != nil {
			return daemon.HelloResult{Err: err}
		}
		res := daemon.HelloResult{Status: rep.Status, Body: raw, RetryAfter: retryAfter}
		if body, ok := rep.Body.(wire.HelloResponse); ok {
			res.Response = &body
		}
		return res
	case RoutePoll:
		s.dropPoll(&s.nodes[r.d], r.seq)
		if err != nil {
			return daemon.PollResult{Seq: r.seq, Err: err}
		}
		res := daemon.PollResult{Seq: r.seq, Status: rep.Status, Body: raw, RetryAfter: retryAfter}
		if body, ok := rep.Body.(wire.PollResponse); ok {
			// The machine reads the response within its step and keeps
			// no hold of it, so one scratch copy serves every poll.
			s.pollResp = body
			res.Response = &s.pollResp
		}
		return res
	case RouteResult:
		return daemon.ResultPosted{ExecID: r.key, Status: rep.Status, Err: err}
	case RouteAck:
		return daemon.AckPosted{InvocationID: r.key, Status: rep.Status, Err: err}
	case RouteNotify:
		return daemon.DrainNoticed{}
	}
	return nil
}

func is2xx(status int) bool { return status >= 200 && status <= 299 }

// ---------------------------------------------------------------- stepping

func (s *Sim) stepPlane(ev plane.Event) {
	for _, eff := range s.plane.Step(s.t(), ev) {
		switch e := eff.(type) {
		case plane.Persist:
			s.met.persists++ // no store: the batch is accepted as applied
		case plane.Reply:
			if uint64(e.Req)&opBit != 0 {
				s.operatorReply(e)
				continue
			}
			if r := s.lookup(uint64(e.Req)); r != nil {
				s.answered(r, e)
			}
		case plane.Park:
			if r := s.lookup(uint64(e.Req)); r != nil {
				r.parkUntil = s.ns(e.Until)
				s.q.push(event{at: r.parkUntil, kind: evDeadline, ref: uint64(r.id)})
			}
		}
	}
}

// bearer is every daemon request's credentials: the sim's plane takes
// the shared bearer (signatures cost CPU the sim does not model).
func bearer() plane.Auth { return plane.Auth{Bearer: true} }

func (s *Sim) stepDaemon(d int32, ev daemon.Event) {
	n := &s.nodes[d]
	if n.state == stExited {
		return
	}
	// One effect buffer for the whole fleet (StepInto), taken while in
	// use so a nested step would get its own.
	effs := n.m.StepInto(s.effects[:0], s.t(), ev)
	s.effects = nil
	for _, eff := range effs {
		switch e := eff.(type) {
		case daemon.SendHello:
			r := s.open(d, RouteHello, 0)
			r.body = plane.Hello{Req: r.id, Body: e.Request, Auth: bearer()}
			s.send(r)
		case daemon.SendPoll:
			r := s.open(d, RoutePoll, int64(float64(e.Request.TimeoutS)*float64(time.Second)))
			r.body = plane.Poll{Req: r.id, Body: e.Request, Auth: bearer()}
			r.seq = e.Seq
			n.polls.add(pollRef{seq: e.Seq, req: r.id})
			s.send(r)
		case daemon.CancelPoll:
			s.cancelPoll(n, e)
		case daemon.NotifyDraining:
			r := s.open(d, RouteNotify, 0)
			r.body = plane.Poll{Req: r.id, Body: e.Request, Auth: bearer()}
			s.send(r)
		case daemon.PostExecResult:
			r := s.open(d, RouteResult, 0)
			r.body = plane.ExecResult{Req: r.id, ExecID: e.ExecID, Body: e.Result, Auth: bearer()}
			r.key = e.ExecID
			s.send(r)
		case daemon.PostAck:
			r := s.open(d, RouteAck, 0)
			r.body = plane.Ack{Req: r.id, Body: e.Ack, Auth: bearer()}
			r.key = e.Ack.InvocationID
			s.send(r)
		case daemon.StartExec:
			if at, ok := s.enqueuedAt[e.Exec.ExecID]; ok {
				delete(s.enqueuedAt, e.Exec.ExecID)
				s.met.latencies = append(s.met.latencies, s.now-at)
			}
			s.met.started++
			s.start(d, e.Exec.ExecID, evExecDone, s.sc.Workload.ExecDuration)
		case daemon.StartSetup:
			s.start(d, e.CommandID, evSetupDone, s.sc.Workload.SetupDuration)
		case daemon.CancelInFlight:
			s.cancelWork(d, "")
		case daemon.CancelWork:
			if e.ExecID != "" {
				s.cancelWork(d, e.ExecID)
			}
		case daemon.SetTimer:
			i := timerIndex(e.ID)
			at := s.ns(e.At)
			n.timers[i], n.armed = at, n.armed|1<<i
			s.q.push(event{at: at, kind: evTimer, d: d, aux: uint8(i), ref: uint64(at)})
			if e.ID == daemon.TimerBackoff {
				n.backoffWait = at - s.now
			}
		case daemon.CancelTimer:
			n.armed &^= 1 << timerIndex(e.ID)
		case daemon.ReportState:
			n.state = stateCode(e.State)
		case daemon.Exit:
			n.state = stExited
			s.met.exits++
		}
		// Runs, refreshes, updates and key rotations are not part of the
		// workload; logs and delivery records have nowhere to go.
	}
	clear(effs)
	s.effects = effs[:0]
}

func (s *Sim) cancelPoll(n *node, e daemon.CancelPoll) {
	if e.KeepReply {
		return // the request runs on; the plane answers it when the next poll overtakes it
	}
	r := s.lookup(uint64(n.polls.find(e.Seq)))
	if r == nil {
		return
	}
	r.cut, r.err = true, errCancelled
	s.q.push(event{at: s.now, kind: evFeed, ref: uint64(r.id)})
	if r.atPlane {
		s.q.push(event{at: s.now + s.latency(), kind: evGone, ref: uint64(r.id)})
	}
}

// slot is the index of a free element of items: one its free list gives
// back, or a new zero one appended. Slots are reused so that a long run
// holds only what is in flight.
func slot[T any](items *[]T, free *[]uint32) uint32 {
	if n := len(*free); n > 0 {
		i := (*free)[n-1]
		*free = (*free)[:n-1]
		return i
	}
	var zero T
	*items = append(*items, zero)
	return uint32(len(*items) - 1)
}

// ---------------------------------------------------------------- work

func (s *Sim) start(d int32, id string, k kind, dur Dist) {
	i := slot(&s.runs, &s.freeRun)
	w := &s.runs[i]
	w.gen++
	w.d, w.id, w.setup, w.cancelled, w.started = d, id, k == evSetupDone, false, s.now
	s.q.push(event{at: s.now + max(0, dur.draw(s.rng)), kind: k, ref: uint64(w.gen)<<32 | uint64(i)})
}

// cancelWork ends daemon d's running work (or only exec id) at once, as
// killed: its pending end event goes stale with the new generation.
func (s *Sim) cancelWork(d int32, id string) {
	for i := range s.runs {
		w := &s.runs[i]
		if w.d != d || w.cancelled || (id != "" && w.id != id) {
			continue
		}
		w.gen++
		w.cancelled = true
		k := evExecDone
		if w.setup {
			k = evSetupDone
		}
		s.q.push(event{at: s.now, kind: k, ref: uint64(w.gen)<<32 | uint64(i)})
	}
}

func (s *Sim) workDone(e event) {
	i := uint32(e.ref)
	if int(i) >= len(s.runs) {
		return
	}
	w := &s.runs[i]
	if w.d < 0 || uint64(w.gen) != e.ref>>32 {
		return
	}
	d, id, cancelled, took := w.d, w.id, w.cancelled, s.now-w.started
	w.d, w.id = -1, ""
	s.freeRun = append(s.freeRun, i)
	if e.kind == evSetupDone {
		s.stepDaemon(d, daemon.SetupFinished{CommandID: id, Killed: cancelled})
		return
	}
	res := wire.ExecResult{DurationMS: wire.Int(took / int64(time.Millisecond))}
	if cancelled {
		res.ExitCode = -1
	} else {
		s.met.completed++
	}
	s.stepDaemon(d, daemon.ExecFinished{ExecID: id, Result: res})
}

// ---------------------------------------------------------------- the operator

func (s *Sim) opID() plane.RequestID {
	s.opSeq++
	return plane.RequestID(opBit | s.opSeq)
}

// pickWorker draws a daemon that has a worker id and still runs; a few
// misses (a fleet still booting, drained) give up.
func (s *Sim) pickWorker() (int, bool) {
	for range 8 {
		d := s.rng.IntN(len(s.nodes))
		if n := &s.nodes[d]; n.worker != "" && n.state != stExited {
			return d, true
		}
	}
	return 0, false
}

func (s *Sim) operatorExec() {
	d, ok := s.pickWorker()
	if !ok || s.planeDown {
		s.met.opFailed++
		return
	}
	s.stepPlane(plane.EnqueueExec{WorkerID: s.nodes[d].worker, Body: operator.ExecRequest{Command: "true"}}.Named(s.opID()))
}

func (s *Sim) operatorSetup() {
	d, ok := s.pickWorker()
	if !ok || s.planeDown {
		s.met.opFailed++
		return
	}
	s.stepPlane(plane.EnqueueSetup{WorkerID: s.nodes[d].worker, Body: operator.SetupRequest{Script: "true"}}.Named(s.opID()))
}

func (s *Sim) operatorReply(rep plane.Reply) {
	if !is2xx(rep.Status) {
		s.met.opFailed++
		return
	}
	switch b := rep.Body.(type) {
	case operator.ExecAccepted:
		s.enqueuedAt[b.ExecID] = s.now
		s.met.enqueued++
	}
}

func (s *Sim) hibernateWave(w Wave) {
	until := float64(s.epoch.Add(time.Duration(s.now+int64(w.For))).UnixMilli()) / 1000
	for d := range s.nodes {
		if s.rng.Float64() >= w.Fraction || s.planeDown {
			continue
		}
		if n := &s.nodes[d]; n.worker != "" && n.state != stExited {
			s.stepPlane(plane.EnqueueHibernate{WorkerID: n.worker, Body: operator.HibernateRequest{UntilEpochS: until}}.Named(s.opID()))
		}
	}
}

func (s *Sim) drainWave(w Wave) {
	for d := range s.nodes {
		if s.rng.Float64() < w.Fraction {
			s.stepDaemon(int32(d), daemon.Signal{Kind: daemon.SignalTerm})
		}
	}
}

// ---------------------------------------------------------------- faults

// outage takes the plane down or brings it back. Going down, every open
// request is dropped (the process went away: clients see a reset);
// coming back, the plane is rebuilt from what its store holds, as `nymph
// serve` restarts, which gives every worker a fresh health window.
func (s *Sim) outage(start bool) {
	if !start {
		p, err := plane.Restore(s.pcfg, s.plane.Snapshot(), s.t())
		if err == nil {
			s.plane = p
		}
		s.planeDown = false
		return
	}
	s.planeDown = true
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.id == 0 || !r.atPlane {
			continue
		}
		s.forget(r)
		if !r.daemonDone && !r.cut {
			r.err = errReset
			s.q.push(event{at: s.now + s.latency(), kind: evFeed, ref: uint64(r.id)})
		} else {
			s.release(r)
		}
	}
}

// partition puts partition i in force or lifts it. A loud one resets the
// open requests of the daemons it cuts off; a silent one lets them wait.
func (s *Sim) partition(i int, start bool) {
	if !start {
		for j, k := range s.parts {
			if k == i {
				s.parts = append(s.parts[:j], s.parts[j+1:]...)
				break
			}
		}
		return
	}
	s.parts = append(s.parts, i)
	p := s.sc.Network.Partitions[i]
	if !p.Refuse {
		return
	}
	for j := range s.reqs {
		r := &s.reqs[j]
		if r.id == 0 || r.daemonDone || r.cut {
			continue
		}
		if cut, _ := s.cut(r.d); cut {
			r.cut, r.err = true, errReset
			s.q.push(event{at: s.now, kind: evFeed, ref: uint64(r.id)})
		}
	}
}
