package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// A run is two logical processes, the fleet (every daemon and what its
// driver holds) and the plane (the plane machine, the operator and the
// network's faults at the plane's end). They share no state: all that
// passes between them is Mail, and no mail crosses the network faster
// than the latency distribution's floor, the lookahead. So each side may
// step every event earlier than the other side's next event plus the
// lookahead, and earlier than one lookahead after any of its own mail
// the other has not been handed yet (the other may answer that mail that
// soon), without waiting for it. A run is then the same whether the
// sides are stepped in one loop (Run) or at the same time on two cores
// by a driver outside this package (Sides): the ties between the sides
// are broken by origin, not by which one was stepped first.

// Never is the Next of a side with nothing left to step before the end.
const Never = int64(math.MaxInt64)

// Side is one of a run's two logical processes, for a driver that steps
// them concurrently: the two Sides of one Sim may be stepped at the same
// time, each from its own goroutine, for they share nothing. One Side is
// not safe for concurrent use.
type Side interface {
	// Next is the virtual time of the side's next event, counting the
	// mail delivered to it so far, Never when it has none before the
	// end.
	Next() int64
	// Deliver hands the side the mail the other side sent, in the order
	// it was sent.
	Deliver(mail []Mail)
	// Advance steps at most max events earlier than bound and returns
	// the mail they sent, valid until the next Advance. bound is
	// Sim.Horizon of the earliest of the other side's Next and the mail
	// this side sent that the other has not been delivered, or less;
	// within the call the bound tightens by itself with the mail sent.
	Advance(bound int64, max int) []Mail
}

// Mail is what one side tells the other, due at a virtual time at least
// the lookahead after it was sent. Its fields are the sim's own.
type Mail struct {
	at    int64
	seq   uint64
	kind  mailKind
	route Route
	d     int32
	ref   uint64      // the request (mReq…mGoneDone)
	t     int64       // mRequest: when it was sent; mAccepted: when the plane accepted the exec
	wait  int64       // mRequest: what the client asked the plane to wait
	key   string      // mAccepted: the exec id; mWorker: the worker id the operator may address
	body  plane.Event // mRequest: the request as the plane is stepped with it, but a poll's
	// poll is the body of a poll (RoutePoll, RouteNotify), carried by
	// value: as a plane.Event every poll would be boxed on the heap.
	poll wire.PollRequest
	rep  plane.Reply // mReply
}

// At is the virtual time the mail is due.
func (m *Mail) At() int64 { return m.at }

type mailKind uint8

const (
	// The fleet to the plane.
	mRequest     mailKind = iota + 1 // a daemon request reaches the plane's address
	mGone                            // its client left
	mUndelivered                     // the reply to it could not be handed over
	mWorker                          // the operator learns daemon d's worker id ("": it exited)
	// The plane to the fleet.
	mReply    // the plane's answer reaches the daemon
	mRefused  // the plane was down: connection refused
	mReset    // the plane went down while holding it: connection reset
	mLost     // the answer was lost on the way: the client times out at at
	mGoneDone // the plane let go of a request whose client left
	mAccepted // the plane accepted exec key at t (for dispatch latency)
)

// world is what both sides read and neither changes.
type world struct {
	sc    Scenario
	epoch time.Time
	end   int64
	// look is the lookahead: the least one-way latency the network
	// model can draw, and so the least delay of any mail.
	look int64
}

func (w *world) at(ns int64) time.Time         { return w.epoch.Add(time.Duration(ns)) }
func (w *world) ns(t time.Time) int64          { return int64(t.Sub(w.epoch)) }
func (w *world) timeoutAfter(wait int64) int64 { return wait + int64(w.sc.Network.Timeout) }

// lookahead is the floor of the latency distribution (at least 1 ns):
// latency never draws below it.
func lookahead(d Dist) int64 {
	floor := d.Min
	if d.Kind == DistFixed || d.Kind == "" {
		floor = d.Mean
	}
	return max(1, int64(floor))
}

// side is what both logical processes are made of: a clock, an event
// queue, a random source and the two mailboxes.
type side struct {
	w      *world
	q      queue
	now    int64
	events uint64
	rng    *rand.Rand
	// inbox holds delivered mail until its event is due; an evMail
	// event names its slot.
	inbox    []Mail
	freeMail []uint32
	out      []Mail
	outMin   int64 // the earliest mail in out
	sent     uint64
	// parts are the partitions in force, by index into the scenario's:
	// each side keeps its own, from its own copy of the schedule.
	parts []int
}

func (s *side) t() time.Time { return s.w.at(s.now) }

// Next is the time of the next event, Never past the end.
func (s *side) Next() int64 {
	if s.q.len() == 0 {
		return Never
	}
	if at := s.q.peek().at; at <= s.w.end {
		return at
	}
	return Never
}

// mail sends m to the other side; it must be due a lookahead from now
// or later, which is what lets the sides run apart.
func (s *side) mail(m Mail) {
	if m.at < s.now+s.w.look {
		panic(fmt.Sprintf("sim: mail %d due at %d, sooner than the lookahead after %d", m.kind, m.at, s.now))
	}
	s.sent++
	m.seq = s.q.origin | s.sent
	s.outMin = min(s.outMin, m.at)
	s.out = append(s.out, m)
}

// Deliver queues the other side's mail for its time.
func (s *side) Deliver(mail []Mail) {
	for _, m := range mail {
		if m.at <= s.now && s.events > 0 {
			panic(fmt.Sprintf("sim: mail %d due at %d delivered at %d", m.kind, m.at, s.now))
		}
		i := slot(&s.inbox, &s.freeMail)
		s.inbox[i] = m
		s.q.pushSeq(event{at: m.at, seq: m.seq, kind: evMail, ref: uint64(i)})
	}
}

// take removes the mail an evMail event names.
func (s *side) take(ref uint64) Mail {
	m := s.inbox[ref]
	s.inbox[ref] = Mail{}
	s.freeMail = append(s.freeMail, uint32(ref))
	return m
}

// advance steps up to max events before bound with dispatch and returns
// the mail sent. The bound tightens with every mail sent: the other side
// may answer it one lookahead after it is due.
func (s *side) advance(bound int64, max int, dispatch func(event)) []Mail {
	s.out = s.out[:0]
	s.outMin = Never
	for ; max > 0; max-- {
		at := s.Next()
		if at >= bound || at >= satAdd(s.outMin, s.w.look) || at == Never {
			break
		}
		e := s.q.pop()
		if e.at < s.now {
			panic(fmt.Sprintf("sim: event %d at %d after %d", e.kind, e.at, s.now))
		}
		s.now = e.at
		s.events++
		dispatch(e)
	}
	return s.out
}

func (s *side) latency() int64 { return max(s.w.look, s.w.sc.Network.Latency.draw(s.rng)) }

func (s *side) lost() bool {
	return s.w.sc.Network.Loss > 0 && s.rng.Float64() < s.w.sc.Network.Loss
}

// cut reports whether a partition in force holds daemon d, and whether
// that partition refuses rather than drops.
func (s *side) cut(d int32) (cut, refuse bool) {
	for _, i := range s.parts {
		p := s.w.sc.Network.Partitions[i]
		if float64(d) < p.Fraction*float64(s.w.sc.Daemons) {
			cut = true
			refuse = refuse || p.Refuse
		}
	}
	return cut, refuse
}

// partition puts partition i in force or lifts it on this side.
func (s *side) partition(i int, start bool) {
	if start {
		s.parts = append(s.parts, i)
		return
	}
	for j, k := range s.parts {
		if k == i {
			s.parts = append(s.parts[:j], s.parts[j+1:]...)
			return
		}
	}
}
