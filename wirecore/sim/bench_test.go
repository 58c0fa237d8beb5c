package sim

import (
	"fmt"
	"testing"
)

// BenchmarkSteady runs one simulated hour of a steady fleet per
// iteration in one loop; events/s and ns/event are the figures to
// compare across fleet sizes. hostio/simloop's BenchmarkSteady runs the
// same beside two goroutines, the scale goal's figure.
func BenchmarkSteady(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			if n > 10000 && b.N > 1 {
				b.Skip("100,000 daemons: run with -benchtime=1x")
			}
			b.ReportAllocs()
			var events uint64
			for b.Loop() {
				s, err := New(Steady(n))
				if err != nil {
					b.Fatal(err)
				}
				events += s.Run(nil).Summary.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		})
	}
}
