package daemon

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkStepExecCycle measures the machine on the daemon's hot path: a
// poll brings one exec, the exec finishes (waking a fresh poll), its
// result is posted, the cancelled poll reports back. Four decisions per
// exec; decisions/s is the figure that matters next to the cost of
// spawning `bash -c` (milliseconds).
func BenchmarkStepExecCycle(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Hostname = "bench"
	m := New(cfg, rand.New(rand.NewPCG(1, 2)))
	now := epoch
	m.Step(now, Boot{})
	id := "w1"
	effs := m.Step(now, HelloResult{Status: 200, Response: &wire.HelloResponse{WorkerID: &id}})
	seq := effs[len(effs)-1].(SendPoll).Seq

	body, err := (&wire.Exec{ExecID: "e1", Command: "true"}).MarshalMsg(nil)
	if err != nil {
		b.Fatal(err)
	}
	resp := &wire.PollResponse{Commands: []wire.Command{{ID: "c1", Kind: wire.KindExec, Body: body}}}
	done := ExecFinished{ExecID: "e1", Result: wire.ExecResult{ExitCode: 0, DurationMS: 2}}
	posted := ResultPosted{ExecID: "e1"}
	cancelled := PollResult{Err: errCancelled}

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		effs = m.Step(now, PollResult{Seq: seq, Status: 200, Response: resp})
		seq = effs[len(effs)-1].(SendPoll).Seq
		effs = m.Step(now, done)
		old := seq
		seq = effs[len(effs)-1].(SendPoll).Seq
		m.Step(now, posted)
		cancelled.Seq = old
		m.Step(now, cancelled)
	}
	b.StopTimer()
	if st := m.Status(); st.ExecsRunning != 0 || st.PostsPending != 0 || st.Counters.ExecsOK != uint64(b.N) {
		b.Fatalf("machine drifted: %+v", st)
	}
	b.ReportMetric(float64(4*b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkDispatchExec is the floor under the cycle above: decoding the
// exec command's body alone, which the machine does once per exec.
func BenchmarkDispatchExec(b *testing.B) {
	body, err := (&wire.Exec{ExecID: "e1", Command: "true"}).MarshalMsg(nil)
	if err != nil {
		b.Fatal(err)
	}
	c := wire.Command{ID: "c1", Kind: wire.KindExec, Body: body}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, ok := wire.Dispatch(c).(wire.ExecCommand); !ok {
			b.Fatal("not an exec")
		}
	}
}

var errCancelled = cancelErr{}

type cancelErr struct{}

func (cancelErr) Error() string { return "context canceled" }
