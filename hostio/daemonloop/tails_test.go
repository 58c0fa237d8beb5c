package daemonloop

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/wirecore/wire"
)

// The core's list of runs in flight gets each run's tail; the core's own
// slice is left as it was.
func TestRunTailsFillThePollsInvocations(t *testing.T) {
	var tails runTails
	tails.add("a").Write([]byte("a's output\n"))
	tails.add("b")
	core := []wire.InvocationStatus{
		{InvocationID: "a", State: wire.StateRunning},
		{InvocationID: "b", State: wire.StateRunning},
		{InvocationID: "gone", State: wire.StateRunning},
	}
	got := tails.fill(core)
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
	tails.drop("a")
	if got := tails.fill(core); got[0].StdoutTail != "" {
		t.Fatalf("a dropped run still has a tail: %q", got[0].StdoutTail)
	}
	// A run started again under its id starts with no output.
	tails.add("b").Write([]byte("first try"))
	tails.add("b")
	if got := tails.fill(core); got[1].StdoutTail != "" {
		t.Fatalf("a restarted run kept the old tail: %q", got[1].StdoutTail)
	}
}
