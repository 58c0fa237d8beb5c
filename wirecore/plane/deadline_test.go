package plane

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The deadline heap pops in (until, request) order, built by pushes or by
// init alike.
func TestDeadlineHeap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var in []deadline
	for i := range 500 {
		in = append(in, deadline{until: t0.Add(time.Duration(rnd.IntN(50)) * time.Second), req: RequestID(i + 1)})
	}
	want := slices.Clone(in)
	slices.SortFunc(want, func(a, b deadline) int {
		if c := a.until.Compare(b.until); c != 0 {
			return c
		}
		return int(a.req) - int(b.req)
	})
	var pushed deadlineHeap
	for _, d := range in {
		pushed.push(d)
	}
	built := deadlineHeap(slices.Clone(in))
	built.init()
	for _, h := range []*deadlineHeap{&pushed, &built} {
		var got []deadline
		for len(*h) > 0 {
			got = append(got, h.pop())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("popped out of order")
		}
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// dueParked gives exactly the parked requests due, however their untils
// were split between the in-order queue and the heap, with some answered
// early and some parked anew, and compaction on the way.
func TestDueParkedSplitsInOrderAndHeap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	p := New(Config{Entropy: rand.NewChaCha8([32]byte{})})
	now := t0
	next := RequestID(1)
	for round := range 200 {
		for range rnd.IntN(40) {
			// Mostly the cap (in order), sometimes shorter (out of order).
			wait := 20 * time.Second
			if rnd.IntN(4) == 0 {
				wait = time.Duration(rnd.IntN(20000)) * time.Millisecond
			}
			until := now.Add(wait)
			p.parked[next] = &parked{kind: parkPoll, until: until}
			p.park(next, until)
			next++
		}
		for req := range p.parked {
			if rnd.IntN(10) == 0 {
				delete(p.parked, req) // answered early
			}
		}
		now = now.Add(time.Duration(rnd.IntN(3000)) * time.Millisecond)
		var want []RequestID
		for req, pk := range p.parked {
			if !pk.until.After(now) {
				want = append(want, req)
			}
		}
		slices.Sort(want)
		got := p.dueParked(now)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: due %v, want %v", round, got, want)
		}
		for _, req := range got {
			delete(p.parked, req)
		}
		if n := p.inOrder.len() + len(p.deadlines); n > 2*len(p.parked)+64+40 {
			t.Fatalf("round %d: %d deadline entries kept for %d parked", round, n, len(p.parked))
		}
	}
}
