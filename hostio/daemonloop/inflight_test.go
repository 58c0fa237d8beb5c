package daemonloop

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/wirecore/wire"
)

// The core's list of runs in flight gets each run's tail; the core's own
// slice is left as it was.
func TestInFlightFillsThePollsInvocations(t *testing.T) {
	var f workInFlight
	ctx := context.Background()
	_, tailA, doneA := f.start(ctx, runKey("a"))
	tailA.Write([]byte("a's output\n"))
	f.start(ctx, runKey("b"))
	// An exec under a run's id has no tail, and takes none from the run.
	f.start(ctx, execKey("gone"))
	core := []wire.InvocationStatus{
		{InvocationID: "a", State: wire.StateRunning},
		{InvocationID: "b", State: wire.StateRunning},
		{InvocationID: "gone", State: wire.StateRunning},
	}
	got := f.fill(core)
	want := []wire.InvocationStatus{
		{InvocationID: "a", State: wire.StateRunning, StdoutTail: "a's output\n"},
		{InvocationID: "b", State: wire.StateRunning},
		{InvocationID: "gone", State: wire.StateRunning},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
	if core[0].StdoutTail != "" {
		t.Fatal("fill wrote into the core's list")
	}
	f.ended(runKey("a"))
	if got := f.fill(core); got[0].StdoutTail != "" {
		t.Fatalf("a run that ended still has a tail: %q", got[0].StdoutTail)
	}
	doneA()
	if got := f.fill(core); got[0].StdoutTail != "" {
		t.Fatalf("a forgotten run still has a tail: %q", got[0].StdoutTail)
	}
	// A run started again under its id starts with no output.
	_, tailB, _ := f.start(ctx, runKey("b"))
	tailB.Write([]byte("first try"))
	f.start(ctx, runKey("b"))
	if got := f.fill(core); got[1].StdoutTail != "" {
		t.Fatalf("a restarted run kept the old tail: %q", got[1].StdoutTail)
	}
}

// An exec and a run with the same id are two entries: cancelling one
// leaves the other running, and the end of one does not forget the other.
// A run that ended can be cancelled until it is done.
func TestInFlightKeysExecsAndRunsApart(t *testing.T) {
	var f workInFlight
	parent := context.Background()
	execCtx, execTail, execDone := f.start(parent, execKey("x"))
	runCtx, runTail, runDone := f.start(parent, runKey("x"))
	if execTail != nil || runTail == nil {
		t.Fatalf("tails: exec %v, run %v; want a run's only", execTail, runTail)
	}
	f.cancelOf(execKey("x"))()
	if execCtx.Err() == nil || runCtx.Err() != nil {
		t.Fatalf("cancel of exec x: exec %v, run %v", execCtx.Err(), runCtx.Err())
	}
	execDone()
	if f.cancelOf(execKey("x")) != nil {
		t.Fatal("an exec done is still in flight")
	}
	f.ended(runKey("x"))
	cancel := f.cancelOf(runKey("x"))
	if cancel == nil {
		t.Fatal("a run that ended, not yet done, cannot be cancelled")
	}
	cancel()
	if runCtx.Err() == nil {
		t.Fatal("cancel of run x did not stop it")
	}
	runDone()
	if f.cancelOf(runKey("x")) != nil || len(f.m) != 0 {
		t.Fatalf("entries left: %v", f.m)
	}
	// done cancels the work's context, as the end of its goroutine.
	ctx, _, done := f.start(parent, execKey("y"))
	done()
	if ctx.Err() == nil {
		t.Fatal("done left the context live")
	}
}
