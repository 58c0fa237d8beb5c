// Package simloop steps a wirecore/sim run on two goroutines: the fleet's
// side on one, the plane's on the other. Each steps every event earlier
// than the other's next event plus the lookahead; each publishes its next
// event's time after every step and hands its mail over through a
// single-producer ring, so neither takes a lock. The run is byte for
// byte the one sim.Run gives; only the wall time differs.
//
// It decides when the sides step and hand over mail, nothing of what
// they do. A run too sparse to gain from two goroutines (Density), or a
// process with one P, is stepped in one loop.
//
// The rule a side steps by: every event earlier than the other side's
// next event plus the lookahead, and earlier than one lookahead after
// any of its own mail the other has not taken yet (the other may answer
// that mail that soon).
package simloop

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/wirecore/sim"
)

// MinDensity is the fewest events a run is expected to hold in one
// lookahead (sim.Sim.Density) for Run to step it on two goroutines.
// Sparser, each side mostly waits for the other, and one loop is
// faster: measured with BenchmarkSteady, two goroutines lose at 10,000
// daemons (0.3 events a lookahead) and win at 100,000 (3).
const MinDensity = 2.0

// batch is how many events a side steps between two looks at the other:
// one, so the other hears of its progress at once (2 and 16 were
// slower).
const batch = 1

// ringSize is how much mail one side may have sent and the other not
// taken before the rest waits in the sender's backlog.
const ringSize = 1 << 14

// Run steps s to its end and returns what it measured: on two
// goroutines when the process has two Ps and the run is dense enough to
// gain (Density at least MinDensity), else in one loop. progress, when
// not nil, is called from the fleet's goroutine after every sample. A
// cancelled ctx stops the run; the result then covers what was stepped,
// with ctx's error.
func Run(ctx context.Context, s *sim.Sim, progress func(done, total time.Duration)) (sim.Result, error) {
	if runtime.GOMAXPROCS(0) < 2 || s.Density() < MinDensity {
		return OneLoop(ctx, s, progress)
	}
	return TwoSides(ctx, s, progress)
}

// TwoSides steps s on two goroutines whatever its density, as Run does
// for a dense run.
func TwoSides(ctx context.Context, s *sim.Sim, progress func(done, total time.Duration)) (sim.Result, error) {
	return twoSides(ctx, s, progress, ringSize)
}

func twoSides(ctx context.Context, s *sim.Sim, progress func(done, total time.Duration), ring int) (sim.Result, error) {
	fleet, plane := s.Sides(progress)
	r := &run{horizon: s.Horizon, look: int64(s.Lookahead())}
	r.lanes[0].ring = make([]sim.Mail, ring)
	r.lanes[1].ring = make([]sim.Mail, ring)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.drive(ctx, 1, plane)
	}()
	r.drive(ctx, 0, fleet)
	wg.Wait()
	if r.stopped.Load() {
		return s.Result(), ctx.Err()
	}
	return s.Result(), nil
}

// OneLoop is sim.Run with ctx looked at between batches.
func OneLoop(ctx context.Context, s *sim.Sim, progress func(done, total time.Duration)) (sim.Result, error) {
	stopped := false
	res := s.RunUntil(progress, func() bool {
		stopped = ctx.Err() != nil
		return stopped
	})
	if stopped {
		return res, ctx.Err()
	}
	return res, nil
}

// run is what the two goroutines share. next[i] and lanes[i].sent are
// written by side i only, lanes[i].took by the other side only, stopped
// by either; the padding keeps the fields one side writes off the lines
// the other writes (on the usual 64-byte lines).
type run struct {
	horizon func(int64) int64 // sim.Sim.Horizon
	look    int64
	stopped atomic.Bool
	_       [56]byte
	// next[i] is side i's Next after it last took its mail: it sends
	// nothing due before next[i] plus the lookahead. Published before
	// the taken count, so a reader that sees a count sees a next that
	// counts that mail.
	next  [2]paddedInt
	lanes [2]lane // lanes[i]: the mail side i sends
}

type paddedInt struct {
	atomic.Int64
	_ [56]byte
}

// lane is one side's mail to the other: a ring the sender fills up to
// sent and the receiver empties (clearing each slot) up to took.
type lane struct {
	ring []sim.Mail
	sent atomic.Uint64 // written by the sender
	_    [56]byte
	took atomic.Uint64 // written by the receiver
	_    [56]byte
}

// unseen tracks the due times of the mail a side sent that the other
// has not taken, for the earliest of them: a deque of (index, at) with
// at rising from the front.
type unseen struct {
	idx []uint64
	at  []int64
}

func (u *unseen) push(i uint64, at int64) {
	n := len(u.at)
	for n > 0 && u.at[n-1] >= at {
		n--
	}
	u.idx, u.at = append(u.idx[:n], i), append(u.at[:n], at)
}

// earliest is the earliest due time among mail from index took on.
func (u *unseen) earliest(took uint64) int64 {
	k := 0
	for k < len(u.idx) && u.idx[k] < took {
		k++
	}
	if k > 0 {
		u.idx = append(u.idx[:0], u.idx[k:]...)
		u.at = append(u.at[:0], u.at[k:]...)
	}
	if len(u.at) == 0 {
		return sim.Never
	}
	return u.at[0]
}

// drive steps side i until both sides are done or ctx ends.
func (r *run) drive(ctx context.Context, i int, sd sim.Side) {
	j := 1 - i
	out, in := &r.lanes[i], &r.lanes[j]
	var mine unseen
	var inbox, backlog []sim.Mail
	took, idle := in.took.Load(), 0
	told, published := took, int64(0)
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			r.stopped.Store(true)
		}
		if r.stopped.Load() {
			return
		}
		// The order of these three loads is the protocol. The other's
		// count of this side's mail taken comes before its next, which
		// it stores first: so that next counts all the mail the count
		// covers, and the rest is pending here. Its next comes before
		// its mail: all it sent before it said so is in the ring by then,
		// and what it sends later is due a lookahead after it.
		theirs := out.took.Load()
		other := r.next[j].Load()
		sent := in.sent.Load()
		inbox = inbox[:0]
		for ; took < sent; took++ {
			slot := &in.ring[took%uint64(len(in.ring))]
			inbox = append(inbox, *slot)
			*slot = sim.Mail{}
		}
		sd.Deliver(inbox)
		backlog = flush(out, &mine, backlog)
		// Say how far this side is, then what it took; mail still in the
		// backlog holds the other side back as if it were an event here.
		next := sd.Next()
		pending := mine.earliest(theirs)
		for k := range backlog {
			next = min(next, backlog[k].At()-r.look)
			pending = min(pending, backlog[k].At())
		}
		// A store the other side reads costs it a cache miss: only
		// changes are stored.
		if next != published {
			r.next[i].Store(next)
			published = next
		}
		if took != told {
			in.took.Store(took)
			told = took
		}
		if next == sim.Never && other == sim.Never && pending == sim.Never && in.sent.Load() == took {
			// Neither side has an event left, and no mail is on the way.
			return
		}
		mail := sd.Advance(r.horizon(min(other, pending)), batch)
		backlog = flush(out, &mine, append(backlog, mail...))
		if len(mail) == 0 && sd.Next() == next {
			if idle++; idle%64 == 0 {
				runtime.Gosched()
			}
		} else {
			idle = 0
		}
	}
}

// flush moves mail from backlog into the ring while it has room; what
// does not fit waits for the next flush, so a full ring never blocks a
// side that the other waits on.
func flush(l *lane, mine *unseen, backlog []sim.Mail) []sim.Mail {
	if len(backlog) == 0 {
		return backlog
	}
	size := uint64(len(l.ring))
	i := l.sent.Load()
	room := size - (i - l.took.Load())
	k := 0
	for ; k < len(backlog) && uint64(k) < room; k++ {
		l.ring[(i+uint64(k))%size] = backlog[k]
		mine.push(i+uint64(k), backlog[k].At())
	}
	if k > 0 {
		l.sent.Store(i + uint64(k))
	}
	rest := copy(backlog, backlog[k:])
	clear(backlog[rest:])
	return backlog[:rest]
}
