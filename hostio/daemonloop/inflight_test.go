package daemonloop

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/daemon"
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
	// Until done the run keeps its tail; done drops it.
	if got := f.fill(core); got[0].StdoutTail != "a's output\n" {
		t.Fatalf("a run not yet done lost its tail: %q", got[0].StdoutTail)
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

// The done of a run is its own: when b starts again before the first b's
// done runs, that done leaves the second b's cancel and tail in place.
func TestInFlightDoneForgetsOnlyItsOwnEntry(t *testing.T) {
	var f workInFlight
	parent := context.Background()
	firstCtx, _, firstDone := f.start(parent, runKey("b"))
	secondCtx, secondTail, secondDone := f.start(parent, runKey("b"))
	secondTail.Write([]byte("second try"))
	firstDone()
	if firstCtx.Err() == nil {
		t.Fatal("the first b's done left its context live")
	}
	cancel := f.cancelOf(runKey("b"))
	if cancel == nil {
		t.Fatal("the first b's done forgot the second b: it cannot be cancelled")
	}
	core := []wire.InvocationStatus{{InvocationID: "b", State: wire.StateRunning}}
	if got := f.fill(core); got[0].StdoutTail != "second try" {
		t.Fatalf("the second b's tail after the first b's done: %q, want %q", got[0].StdoutTail, "second try")
	}
	cancel()
	if secondCtx.Err() == nil {
		t.Fatal("the cancel found did not stop the second b")
	}
	secondDone()
	if len(f.m) != 0 {
		t.Fatalf("entries left: %v", f.m)
	}
}

// An exec and a run with the same id are two entries: cancelling one
// leaves the other running, and the end of one does not forget the other.
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
	cancel := f.cancelOf(runKey("x"))
	if cancel == nil {
		t.Fatal("the exec's done forgot the run under its id")
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

// A cancel's log names what it cancels by the id's own kind: an exec_id
// and an invocation_id may be the same string.
func TestCancelOneLogsWhichWork(t *testing.T) {
	logs := &testkit.SyncBuffer{}
	d := newDriver(Options{Transport: &recordingTransport{}, Log: slog.New(slog.NewTextHandler(logs, nil))})
	defer d.stop()
	ctx, _, done := d.inFlight.start(d.work, execKey("x"))
	defer done()
	d.cancelOne(daemon.CancelWork{ExecID: "x"})
	if ctx.Err() == nil {
		t.Fatal("exec x not cancelled")
	}
	d.cancelOne(daemon.CancelWork{InvocationID: "x"})
	want := []string{
		`msg=cancelling exec_id=x`,
		`msg="cancel of work that already ended" invocation_id=x`,
	}
	for _, w := range want {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log has no %q:\n%s", w, logs.String())
		}
	}
}
