package simloop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/sim"
)

func csv(t testing.TB, res sim.Result) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := res.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func build(t testing.TB, sc sim.Scenario) *sim.Sim {
	t.Helper()
	s, err := sim.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTwoGoroutinesGiveTheOneLoopsRun: the mixed scenario (outage,
// partition, waves, loss) and a steady fleet, each stepped on two
// goroutines several times, give sim.Run's CSV byte for byte.
func TestTwoGoroutinesGiveTheOneLoopsRun(t *testing.T) {
	steady := sim.Steady(200)
	steady.Duration = 5 * time.Minute
	for _, sc := range []sim.Scenario{sim.Mixed(), steady} {
		want := csv(t, build(t, sc).Run(nil))
		for i := range 4 {
			res, err := TwoSides(context.Background(), build(t, sc), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := csv(t, res); !bytes.Equal(got, want) {
				t.Fatalf("%s, run %d on two goroutines: the CSV differs from the one loop's", sc.Name, i)
			}
		}
	}
}

// TestFullRingsKeepTheRun: with rings of two mails almost every mail
// waits in its sender's backlog; the run is still the one loop's.
func TestFullRingsKeepTheRun(t *testing.T) {
	sc := sim.Mixed()
	want := csv(t, build(t, sc).Run(nil))
	for _, ring := range []int{1, 2, 3} {
		res, err := twoSides(context.Background(), build(t, sc), nil, ring)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(csv(t, res), want) {
			t.Fatalf("rings of %d: the CSV differs from the one loop's", ring)
		}
	}
}

// TestSparseRunsInOneLoop: the benchmark's 100,000 daemons are dense
// enough for two goroutines, 10,000 are not, nor is a network that can
// deliver at once (no lookahead); Run gives such a run whole.
func TestSparseRunsInOneLoop(t *testing.T) {
	if d := build(t, sim.Steady(100000)).Density(); d < MinDensity {
		t.Errorf("100,000 daemons: density %.2f, want at least %.1f", d, MinDensity)
	}
	if d := build(t, sim.Steady(10000)).Density(); d >= MinDensity {
		t.Errorf("10,000 daemons: density %.2f, want under %.1f", d, MinDensity)
	}
	sc := sim.Mixed()
	sc.Network.Latency = sim.Dist{Kind: sim.DistUniform, Min: 0, Max: 4 * time.Millisecond}
	if d := build(t, sc).Density(); d >= MinDensity {
		t.Errorf("no lookahead: density %.2f", d)
	}
	want := csv(t, build(t, sc).Run(nil))
	res, err := Run(context.Background(), build(t, sc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(csv(t, res), want) {
		t.Fatal("the CSV differs from sim.Run's")
	}
}

// TestCancelStopsBothSides: a cancelled context ends the run early, with
// its error and the rows stepped so far.
func TestCancelStopsBothSides(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var once bool
	res, err := TwoSides(ctx, build(t, sim.Steady(2000)), func(done, total time.Duration) {
		if !once && done >= time.Minute {
			once = true
			cancel()
		}
	})
	if err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// A run that ends before the context does reports no error.
	done, cancelLater := context.WithCancel(context.Background())
	defer cancelLater()
	if _, err := TwoSides(done, build(t, sim.Mixed()), nil); err != nil {
		t.Fatalf("a whole run: err = %v", err)
	}
	if n := len(res.Rows); n == 0 || n >= 360 {
		t.Fatalf("%d rows: want some, not the whole hour's 360", n)
	}
}

// BenchmarkSteady runs one simulated hour of a steady fleet (sim.Steady)
// per iteration, in one loop and on two goroutines (TwoSides) side by
// side, with the collector as nymph sim sets it (TuneGC): the scale goal
// is BenchmarkSteady/100000/two-sides (-benchtime=1x), the one Run picks
// for it.
func BenchmarkSteady(b *testing.B) {
	defer TuneGC()() // as nymph sim runs
	for _, n := range []int{1000, 10000, 100000} {
		for _, driver := range []string{"one-loop", "two-sides"} {
			b.Run(fmt.Sprintf("%d/%s", n, driver), func(b *testing.B) {
				if n > 10000 && b.N > 1 {
					b.Skip("100,000 daemons: run with -benchtime=1x")
				}
				b.ReportAllocs()
				var events uint64
				for b.Loop() {
					s := build(b, sim.Steady(n))
					var res sim.Result
					if driver == "one-loop" {
						res = s.Run(nil)
					} else {
						var err error
						if res, err = TwoSides(context.Background(), s, nil); err != nil {
							b.Fatal(err)
						}
					}
					events += res.Summary.Events
				}
				b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			})
		}
	}
}

func TestTuneGCSetsAndRestores(t *testing.T) {
	t.Setenv("GOGC", "") // registers the restore of the variable
	os.Unsetenv("GOGC")
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	restore := TuneGC()
	if got := debug.SetGCPercent(GCPercent); got != GCPercent {
		t.Errorf("TuneGC set GOGC %d, want %d", got, GCPercent)
	}
	restore()
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("restore left GOGC %d, want the 150 before", got)
	}
}

func TestTuneGCLeavesTheEnvironmentsChoice(t *testing.T) {
	t.Setenv("GOGC", "100")
	before := debug.SetGCPercent(120)
	defer debug.SetGCPercent(before)
	restore := TuneGC()
	if got := debug.SetGCPercent(120); got != 120 {
		t.Errorf("with GOGC set, TuneGC changed the target to %d", got)
	}
	restore()
}
