//go:build unix

package process

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkProcessToEntry is the baseline of the per-kind overhead: a run
// from Execute to the entry program's first instruction (ms-to-entry) and
// to the outcome (ns/op), through the whole workdir contract.
func BenchmarkProcessToEntry(b *testing.B) {
	b.ReportAllocs()
	reg := runners.NewRegistry(runners.Config{Root: b.TempDir(), Entry: []string{entryPath}}, New(Options{}))
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		o := reg.ExecuteAs(context.Background(), runners.KindProcess, wire.Run{InvocationID: "bench-" + strconv.Itoa(i), ArgsBlob: []byte("stamp")}, "")
		ns, err := strconv.ParseInt(string(o.ResultBlob), 10, 64)
		if o.State != wire.StateSucceeded || err != nil {
			b.Fatalf("%+v %v", o, err)
		}
		total += time.Unix(0, ns).Sub(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-entry")
}
