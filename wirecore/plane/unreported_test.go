package plane

import (
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// The invocations a Tick finds unreported through its stamps are exactly
// those a look at every running invocation finds, whatever the fleet
// does: polls listing some of their runs and not others, parked or
// answered at once, a LostAfter below the poll cap (a parked poll holds
// its runs back), a clock that steps back, workers going lost, runs
// ending, and restores.
func TestUnreportedMatchesASweepOfEveryRun(t *testing.T) {
	for seed := range uint64(20) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		cfg := Config{Entropy: rand.NewChaCha8([32]byte{byte(seed)}), LostAfter: time.Duration(5+rnd.IntN(40)) * time.Second}
		p := New(cfg)
		now := t0
		var req RequestID
		step := func(ev Request) []Effect { req++; return p.Step(now, ev.Named(req)) }
		var workers []string
		one := "1"
		for i := range 6 {
			for _, eff := range step(Hello{Auth: Auth{Bearer: true}, Body: wire.HelloRequest{MachineID: string(rune('a' + i)),
				Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4},
				Versions:     wire.Versions{Daemon: &one, Protocol: &one}}}) {
				if r, ok := eff.(Reply); ok {
					workers = append(workers, *r.Body.(wire.HelloResponse).WorkerID)
				}
			}
		}
		found := 0
		for round := range 600 {
			switch k := rnd.IntN(10); {
			case k < 2:
				step(EnqueueRun{Body: operator.RunRequest{Function: wire.Function{Module: "m", Qualname: "f"}}})
			case k < 6:
				w := workers[rnd.IntN(len(workers))]
				var listed []wire.InvocationStatus
				for _, id := range p.runningOf(w) {
					if rnd.IntN(3) > 0 {
						listed = append(listed, wire.InvocationStatus{InvocationID: id, State: "running"})
					}
				}
				step(Poll{Auth: Auth{Bearer: true}, Body: wire.PollRequest{WorkerID: w, Invocations: listed, TimeoutS: wire.Float(rnd.IntN(2) * 20)}})
			case k < 7:
				ids := slices.Sorted(maps.Keys(p.alive))
				if len(ids) > 0 {
					step(Ack{Auth: Auth{Bearer: true}, Body: wire.Ack{InvocationID: ids[rnd.IntN(len(ids))], State: wire.StateSucceeded}})
				}
			case k < 8 && round%50 == 0:
				np, err := Restore(cfg, p.Snapshot(), now)
				if err != nil {
					t.Fatal(err)
				}
				p = np
			}
			now = now.Add(time.Duration(rnd.IntN(4000)) * time.Millisecond)
			if rnd.IntN(20) == 0 {
				now = now.Add(-time.Duration(rnd.IntN(8000)) * time.Millisecond) // the clock steps back
			}
			if rnd.IntN(3) > 0 {
				p.Step(now, Tick{}) // the real path: lost workers, due parks, and the sweep
				continue
			}
			var want []string
			for id, since := range p.alive {
				if p.silent(id, since, now) {
					want = append(want, id)
				}
			}
			sort.Strings(want)
			got := p.dueUnreported(now)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d round %d: the stamps found %v unreported, a sweep %v", seed, round, got, want)
			}
			found += len(got)
			for _, id := range got {
				p.failLost(p.invocations[id], now, "unreported")
			}
		}
		if found == 0 {
			t.Errorf("seed %d: no run was ever unreported: the test checked nothing", seed)
		}
	}
}
