package plane_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkUndelivered measures taking a poll reply back (a relay that
// could not write it) in fleets of growing size: the reply's worker is
// the newest, so a plane that looked for it among its workers would pay
// for every one. Each iteration takes the exec back and hands it out
// again with a fresh poll.
func BenchmarkUndelivered(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			h, last := benchFleet(b, n)
			h.benchStep(b, plane.EnqueueExec{WorkerID: last, Body: operator.ExecRequest{Command: "true"}})
			poll := plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: last}}
			h.benchStep(b, poll)
			b.ReportAllocs()
			for b.Loop() {
				sent := h.req
				if effs := h.p.Step(h.now, plane.Undelivered{Req: sent}); len(effs) == 0 {
					b.Fatal("the exec was not taken back")
				}
				if rep := h.benchStep(b, poll); len(rep.Body.(wire.PollResponse).Commands) != 1 {
					b.Fatalf("the poll after the take-back: %+v", rep.Body)
				}
			}
		})
	}
}

// benchFleet is a plane with n workers that said hello, and the id of the
// newest: the last a walk of the fleet would reach.
func benchFleet(b *testing.B, n int) (h *forgetHarness, newest string) {
	h = &forgetHarness{p: plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{3}), MaxWorkers: n}), now: t0}
	for i := range n {
		newest = h.benchHello(b, fmt.Sprintf("m%d", i))
	}
	return h, newest
}

func (h *forgetHarness) benchStep(b *testing.B, ev plane.Request) plane.Reply {
	h.req++
	for _, eff := range h.p.Step(h.now, ev.Named(h.req)) {
		if rep, ok := eff.(plane.Reply); ok {
			return rep
		}
	}
	b.Fatalf("step %T: no reply", ev)
	return plane.Reply{}
}

func (h *forgetHarness) benchHello(b *testing.B, machine string) string {
	rep := h.benchStep(b, plane.Hello{Auth: bearer, Body: helloReq(machine)})
	return *rep.Body.(wire.HelloResponse).WorkerID
}

// BenchmarkRepeatedSetupAck measures the ack of a setup that is no
// longer in flight (a daemon retrying an ack whose answer it lost) in
// fleets of growing size.
func BenchmarkRepeatedSetupAck(b *testing.B) {
	for _, n := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			h, last := benchFleet(b, n)
			h.benchStep(b, plane.EnqueueSetup{WorkerID: last, Body: operator.SetupRequest{Script: "true"}})
			rep := h.benchStep(b, plane.Poll{Auth: bearer, Body: wire.PollRequest{WorkerID: last}})
			ack := plane.Ack{Auth: bearer, Body: wire.Ack{InvocationID: "setup-" + rep.Body.(wire.PollResponse).Commands[0].ID,
				State: wire.StateSucceeded, WorkerID: last}}
			h.benchStep(b, ack)
			b.ReportAllocs()
			for b.Loop() {
				if rep := h.benchStep(b, ack); rep.Status != plane.StatusOK {
					b.Fatalf("repeated ack: %d %+v", rep.Status, rep.Body)
				}
			}
		})
	}
}
