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
