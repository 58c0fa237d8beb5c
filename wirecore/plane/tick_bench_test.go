package plane_test

import (
	"fmt"
	"testing"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkTick measures the health clock's step (a long-lived plane
// takes one a second) in fleets each of whose workers runs one
// invocation, all recently reported: a Tick that finds nothing lost,
// unreported or due.
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("running=%d", n), func(b *testing.B) {
			h, _ := benchFleet(b, n)
			for _, w := range h.p.Snapshot().Workers {
				h.benchStep(b, plane.EnqueueRun{Body: operator.RunRequest{Function: wire.Function{Module: "jobs", Qualname: "f"}}})
				if rep := h.benchStep(b, plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: w.ID}}); len(rep.Body.(wire.PollResponse).Commands) != 1 {
					b.Fatalf("worker %s's poll: %+v", w.ID, rep.Body)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if effs := h.p.Step(h.now, plane.Tick{}); len(effs) != 0 {
					b.Fatalf("a Tick with nothing due: %+v", effs)
				}
			}
		})
	}
}
