package sim

import "testing"

// TestAllocationsPerEvent holds the steady fleet's allocations where the
// poll path left them: of the six values each idle poll boxed, the
// poll's result and the poll itself no longer are (the first by being
// stepped as built, the second by crossing between the sides by value).
// What is left is the machines' effects (SendPoll, Park, the Reply and
// its body) and the runs' own work. A value that starts to escape again
// (an event handed to fmt, say) shows here as about one more allocation
// per three events.
func TestAllocationsPerEvent(t *testing.T) {
	sc := Steady(300)
	var events uint64
	allocs := testing.AllocsPerRun(1, func() {
		s, err := New(sc)
		if err != nil {
			t.Fatal(err)
		}
		events = s.Run(nil).Summary.Events
	})
	perEvent := allocs / float64(events)
	t.Logf("%d events, %.0f allocations: %.2f an event", events, allocs, perEvent)
	if perEvent > 2.1 {
		t.Errorf("%.2f allocations an event, want at most 2.1 (2.5 with the poll and its result boxed)", perEvent)
	}
}
