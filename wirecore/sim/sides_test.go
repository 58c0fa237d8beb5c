package sim

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// interleave steps the two sides of s in an order drawn from rng: which
// side goes next, how many events it steps, and how long its mail waits
// before the other side is handed it. Each side steps only what a
// concurrent driver could: events before the other's next plus the
// lookahead, and before any mail to it still on the way.
func interleave(s *Sim, rng *rand.Rand) Result {
	sides := [2]Side{}
	sides[0], sides[1] = s.Sides(nil)
	var inFlight [2][]Mail // inFlight[i]: sent by side i, not yet delivered
	minAt := func(ms []Mail) int64 {
		at := Never
		for _, m := range ms {
			at = min(at, m.at)
		}
		return at
	}
	for {
		if sides[0].Next() == Never && sides[1].Next() == Never && len(inFlight[0])+len(inFlight[1]) == 0 {
			return s.Result()
		}
		x := rng.IntN(2)
		y := 1 - x
		if rng.IntN(3) > 0 || sides[x].Next() == Never {
			sides[x].Deliver(inFlight[y])
			inFlight[y] = nil
		}
		bound := min(s.Horizon(min(sides[y].Next(), minAt(inFlight[x]))), minAt(inFlight[y]))
		out := sides[x].Advance(bound, 1+rng.IntN(200))
		inFlight[x] = append(inFlight[x], out...)
	}
}

// TestAnyScheduleGivesTheSameRun: the two sides stepped in any order a
// concurrent driver could take — batches of any size, mail handed over
// late — give the CSV the one loop gives, byte for byte.
func TestAnyScheduleGivesTheSameRun(t *testing.T) {
	sc := Mixed()
	_, want := run(t, sc)
	for seed := range uint64(6) {
		s, err := New(sc)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := interleave(s, rand.New(rand.NewPCG(seed, 7))).WriteCSV(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("schedule %d gave another CSV than the one loop", seed)
		}
	}
	for _, batch := range []int{1, 3, 1000} {
		s, _ := New(sc)
		f, p := s.Sides(nil)
		s.runSides(f, p, batch, nil)
		var got bytes.Buffer
		if err := s.Result().WriteCSV(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("batch %d gave another CSV than the one loop", batch)
		}
	}
}
