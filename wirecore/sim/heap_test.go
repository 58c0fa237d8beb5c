package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/plane"
)

// The calendar queue hands events out in exactly (at, seq) order, as the
// plain heap it replaced did: pushes at the current instant, within the
// ring's horizon and far past it, sparse and dense, interleaved with pops.
func TestQueueOrder(t *testing.T) {
	for _, spread := range []time.Duration{time.Millisecond, time.Second, 5 * time.Minute} {
		rnd := rand.New(rand.NewPCG(uint64(spread), 7))
		var q queue
		var ref eventHeap // the reference: one binary heap of everything
		var seq uint64
		now := int64(0)
		popped := 0
		for step := range 200000 {
			if rnd.IntN(3) > 0 || q.len() == 0 {
				at := now
				switch rnd.IntN(4) {
				case 0: // now
				case 1:
					at += rnd.Int64N(int64(spread))
				case 2:
					at += rnd.Int64N(int64(2 * time.Minute)) // across the horizon
				case 3:
					at += int64(time.Hour) + rnd.Int64N(int64(time.Hour))
				}
				seq++
				e := event{at: at, ref: seq}
				q.push(e)
				e.seq = seq
				ref.push(e)
				continue
			}
			got, want := q.pop(), ref.pop()
			if got != want {
				t.Fatalf("spread %v, step %d: popped %+v, want %+v", spread, step, got, want)
			}
			now = got.at
			popped++
		}
		for q.len() > 0 {
			if got, want := q.pop(), ref.pop(); got != want {
				t.Fatalf("spread %v, draining: popped %+v, want %+v", spread, got, want)
			}
			popped++
		}
		if len(ref) != 0 || popped < 100000 {
			t.Fatalf("spread %v: %d left in the reference, %d popped", spread, len(ref), popped)
		}
	}
}

// init orders what appending left unordered.
func TestEventHeapInit(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 1))
	var h eventHeap
	for i := range 1000 {
		h = append(h, event{at: rnd.Int64N(100), seq: uint64(i)})
	}
	want := slices.Clone(h)
	slices.SortFunc(want, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return int(a.seq) - int(b.seq)
	})
	h.init()
	for i := range want {
		if got := h.pop(); got != want[i] {
			t.Fatalf("pop %d: %+v, want %+v", i, got, want[i])
		}
	}
}

// A pollSet finds and drops what it holds, past its inline room too.
func TestPollSet(t *testing.T) {
	var p pollSet
	var ref []pollRef
	rnd := rand.New(rand.NewPCG(5, 5))
	for step := range 5000 {
		if rnd.IntN(2) == 0 || len(ref) == 0 {
			r := pollRef{seq: uint64(step + 1), req: plane.RequestID(step + 100)}
			p.add(r)
			ref = append(ref, r)
		} else {
			i := rnd.IntN(len(ref))
			p.drop(ref[i].seq)
			ref = append(ref[:i], ref[i+1:]...)
		}
		if int(p.n)+len(p.spill) != len(ref) {
			t.Fatalf("step %d: holds %d, want %d", step, int(p.n)+len(p.spill), len(ref))
		}
		for _, r := range ref {
			if got := p.find(r.seq); got != r.req {
				t.Fatalf("step %d: find(%d) = %d, want %d", step, r.seq, got, r.req)
			}
		}
		if p.find(0) != 0 {
			t.Fatalf("step %d: found a poll never added", step)
		}
	}
}
