// Package simloop steps a wirecore/sim run on two goroutines: the fleet's
// side on one, the plane's on the other, each stepping every event
// earlier than the other's next event plus the lookahead, the two
// exchanging their mail under one mutex. The run is byte for byte the
// one sim.Run gives; only the wall time differs.
//
// It decides when the sides step and hand over mail, nothing of what
// they do. A run whose lookahead is too short to be worth two goroutines,
// or a process with one P, is stepped by sim.Run.
package simloop

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/wirecore/sim"
)

// MinLookahead is the shortest lookahead stepped on two goroutines: with
// less, the sides wait on each other after every event or two and one
// loop is faster.
const MinLookahead = 20 * time.Microsecond

// batch bounds the events a side steps between two exchanges, so the
// other side hears of its progress while it still has work.
const batch = 32

// Run steps s to its end and returns what it measured. progress, when
// not nil, is called from the fleet's goroutine after every sample. A
// cancelled ctx stops both sides; the result then covers what was
// stepped, with ctx's error.
func Run(ctx context.Context, s *sim.Sim, progress func(done, total time.Duration)) (sim.Result, error) {
	if s.Lookahead() < MinLookahead || runtime.GOMAXPROCS(0) < 2 {
		return runOneLoop(ctx, s, progress)
	}
	fleet, plane := s.Sides(progress)
	x := &exchange{look: int64(s.Lookahead())}
	for i := range x.next {
		x.next[i], x.boxMin[i] = 0, sim.Never
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x.drive(ctx, 1, plane)
	}()
	x.drive(ctx, 0, fleet)
	wg.Wait()
	return s.Result(), ctx.Err()
}

// runOneLoop is sim.Run with ctx looked at between batches.
func runOneLoop(ctx context.Context, s *sim.Sim, progress func(done, total time.Duration)) (sim.Result, error) {
	fleet, plane := s.Sides(progress)
	look := int64(s.Lookahead())
	sides := [2]sim.Side{fleet, plane}
	for n := 0; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return s.Result(), ctx.Err()
		}
		a, b := sides[0], sides[1]
		if b.Next() < a.Next() {
			a, b = b, a
		}
		if a.Next() == sim.Never {
			return s.Result(), nil
		}
		b.Deliver(a.Advance(boundAfter(b.Next(), look), batch))
	}
}

// exchange is what the two goroutines share.
type exchange struct {
	look int64
	// gen counts exchanges; a side that cannot step waits for it to move.
	gen     atomic.Uint64
	stopped atomic.Bool

	mu sync.Mutex
	// box[i] is the mail for side i it has not taken yet, boxMin[i] the
	// earliest of it.
	box    [2][]sim.Mail
	boxMin [2]int64
	// next[i] is side i's Next when it last exchanged, counting the mail
	// it took: it sends nothing due before next[i] plus the lookahead.
	next [2]int64
}

// drive steps side i until both sides are done or ctx ends.
func (x *exchange) drive(ctx context.Context, i int, sd sim.Side) {
	j := 1 - i
	var in, out []sim.Mail
	for n := 0; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			x.stopped.Store(true)
		}
		if x.stopped.Load() {
			return
		}
		mine := sd.Next()
		x.mu.Lock()
		x.box[j] = append(x.box[j], out...)
		x.boxMin[j] = min(x.boxMin[j], earliest(out))
		in, x.box[i] = x.box[i], in[:0]
		x.next[i] = min(mine, x.boxMin[i])
		x.boxMin[i] = sim.Never
		bound := boundAfter(min(x.next[j], x.boxMin[j]), x.look)
		done := x.next[i] == sim.Never && x.next[j] == sim.Never && len(x.box[j]) == 0
		seen := x.gen.Add(1)
		x.mu.Unlock()
		if done {
			return
		}
		sd.Deliver(in)
		before := sd.Next()
		out = append(out[:0], sd.Advance(bound, batch)...)
		if len(out) == 0 && sd.Next() == before {
			x.wait(seen)
		}
	}
}

// wait spins until the other side has exchanged since seen (or the run
// stopped), yielding the processor now and then to the collector.
func (x *exchange) wait(seen uint64) {
	for k := 0; x.gen.Load() == seen && !x.stopped.Load(); k++ {
		if k%64 == 63 {
			runtime.Gosched()
		}
	}
}

func earliest(mail []sim.Mail) int64 {
	at := sim.Never
	for i := range mail {
		at = min(at, mail[i].At())
	}
	return at
}

// boundAfter is t plus the lookahead, Never when t is.
func boundAfter(t, look int64) int64 {
	if t == sim.Never {
		return sim.Never
	}
	return t + look
}
