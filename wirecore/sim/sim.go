package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
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

func (noJitter) Float64() float64 { return 0 }
func (n noJitter) Uint64() uint64 { return n.r.Uint64() }

// Sim is one run in progress. Build it with New and drive it with Run,
// or hand its Sides to a concurrent driver.
type Sim struct {
	w     world
	fleet fleet
	plane planeSide
}

// The seeds' second words: one random stream per purpose and side.
const (
	streamFleet   = 0x6e796d7068   // the fleet's network draws and the work's durations
	streamDaemons = 0x6461656d6f6e // the daemons' jitter and ids
	streamPlane   = 0x706c616e65   // the plane's network draws and the operator
)

// New checks the scenario and builds the fleet, nothing stepped yet.
func New(sc Scenario) (*Sim, error) {
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s := &Sim{w: world{
		sc:    sc,
		epoch: time.Unix(epochUnix, 0).UTC(),
		end:   int64(sc.Duration),
		look:  lookahead(sc.Network.Latency),
	}}
	s.fleet = fleet{
		side:       side{w: &s.w, rng: rand.New(rand.NewPCG(sc.Seed, streamFleet))},
		enqueuedAt: map[string]int64{},
	}
	s.plane = planeSide{
		side:    side{w: &s.w, rng: rand.New(rand.NewPCG(sc.Seed, streamPlane))},
		rate:    sc.Workload.ExecRate,
		workers: make([]string, sc.Daemons),
	}
	s.plane.q.origin = 1 << 63

	var key [32]byte
	for i := range 8 {
		key[i] = byte(sc.Seed >> (8 * i))
	}
	s.plane.pcfg = plane.Config{
		Entropy:    rand.NewChaCha8(key),
		PollCap:    sc.Plane.PollCap,
		Retain:     sc.Plane.Retain,
		MaxWorkers: sc.Daemons,
	}
	s.plane.plane = plane.New(s.plane.pcfg)

	drng := rand.New(rand.NewPCG(sc.Seed, streamDaemons))
	var drand daemon.Rand = drng
	if sc.Daemon.NoJitter {
		drand = noJitter{drng}
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
	s.fleet.nodes = make([]node, sc.Daemons)
	for i := range s.fleet.nodes {
		c := cfg
		c.MachineID = fmt.Sprintf("sim-%07d", i)
		c.Hostname = c.MachineID
		s.fleet.nodes[i].m = daemon.New(c, drand)
	}
	s.fleet.schedule()
	s.plane.schedule()
	return s, nil
}

// Lookahead is how far apart in virtual time the two sides may run: the
// least latency the network model draws.
func (s *Sim) Lookahead() time.Duration { return time.Duration(s.w.look) }

// Horizon is the bound a side may step up to (Side.Advance) when nothing
// the other side may still send it is due before t: t plus the
// lookahead, Never when t is.
func (s *Sim) Horizon(t int64) int64 { return satAdd(t, s.w.look) }

// Density is the events the run is expected to hold in one lookahead:
// three for each poll cycle of each daemon (the poll reaching the plane,
// its deadline, the reply reaching the daemon), a cycle every
// wait_max_s. Below one or two, the sides of a run mostly wait for each
// other, and stepping them concurrently gains nothing.
func (s *Sim) Density() float64 {
	cycle := s.w.sc.Daemon.WaitMax.Seconds()
	if cycle <= 0 {
		return 0
	}
	return float64(s.w.sc.Daemons) * 3 / cycle * s.Lookahead().Seconds()
}

// Sides are the run's two logical processes, for a driver that steps
// them concurrently (see Side). progress, when not nil, is called by the
// fleet after every sample with the virtual time reached.
func (s *Sim) Sides(progress func(done, total time.Duration)) (fleetSide, planeSide Side) {
	s.fleet.progress = progress
	return &s.fleet, &s.plane
}

// Run steps the simulation to its end in one loop and returns what it
// measured. progress, when not nil, is called after every sample with
// the virtual time reached.
func (s *Sim) Run(progress func(done, total time.Duration)) Result {
	return s.RunUntil(progress, nil)
}

// RunUntil is Run that asks stop, when not nil, between batches of steps
// and ends early when it says so; the Result then covers what was
// stepped.
func (s *Sim) RunUntil(progress func(done, total time.Duration), stop func() bool) Result {
	f, p := s.Sides(progress)
	s.runSides(f, p, runBatch, stop)
	return s.Result()
}

// runBatch is how many events one side steps before the loop looks at
// the other again.
const runBatch = 64

// runSides steps the two sides in one loop until neither has an event
// left before the end or stop says so: the side whose next event is
// earlier steps up to the other's next plus the lookahead, batch events
// at a time (at least one), and its mail goes straight to the other. Any
// batch gives the same run.
func (s *Sim) runSides(a, b Side, batch int, stop func() bool) {
	batch = max(1, batch)
	for {
		if stop != nil && stop() {
			return
		}
		na, nb := a.Next(), b.Next()
		switch {
		case na == Never && nb == Never:
			return
		case na <= nb:
			b.Deliver(a.Advance(s.Horizon(nb), batch))
		default:
			a.Deliver(b.Advance(s.Horizon(na), batch))
		}
	}
}

// satAdd is t + d, Never when t is.
func satAdd(t, d int64) int64 {
	if t == Never {
		return Never
	}
	return t + d
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
