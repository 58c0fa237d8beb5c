package plane_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// The loop a host writes around the plane: it steps one event at a time
// with the time it happened, makes each Persist durable before it sends
// any reply of the same step, sends the replies, and arms a timer for
// each Park that steps PollDeadline when it fires. hostio/planeserver is
// this loop over HTTP and a Store.
func Example() {
	// Hosts pass crypto/rand.Reader; a seeded source keeps this example's
	// ids the same on every run.
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{})})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	timers := map[plane.RequestID]time.Time{} // request → when its PollDeadline is due
	var workerID string

	carryOut := func(effects []plane.Effect) {
		for _, eff := range effects {
			switch e := eff.(type) {
			case plane.Persist:
				// A real host applies e.Batch to its store here and
				// sends nothing of this step if that fails.
				fmt.Printf("store %d workers, %d commands, %d execs\n",
					len(e.Batch.Workers), len(e.Batch.Commands), len(e.Batch.Execs))
			case plane.Reply:
				delete(timers, e.Req)
				switch body := e.Body.(type) {
				case wire.HelloResponse:
					workerID = *body.WorkerID
					fmt.Printf("reply %d: %d, a worker id\n", e.Req, e.Status)
				case wire.PollResponse:
					fmt.Printf("reply %d: %d, %d commands\n", e.Req, e.Status, len(body.Commands))
				default:
					fmt.Printf("reply %d: %d, %T\n", e.Req, e.Status, body)
				}
			case plane.Park:
				timers[e.Req] = e.Until
				fmt.Printf("park %d for %s\n", e.Req, e.Until.Sub(now))
			}
		}
	}

	// A daemon says hello: the plane registers its worker.
	one, version := "1", "0.1.0"
	carryOut(p.Step(now, plane.Hello{Auth: plane.Auth{Bearer: true}, Body: wire.HelloRequest{
		MachineID: "m1", Label: "box", Tags: []string{},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4},
		Versions:     wire.Versions{Daemon: &version, Protocol: &one},
	}}.Named(1)))

	// It polls; nothing is queued, so the poll parks.
	poll := plane.Poll{Auth: plane.Auth{Bearer: true}, Body: wire.PollRequest{WorkerID: workerID, TimeoutS: 20}}
	carryOut(p.Step(now, poll.Named(2)))

	// An operator queues an exec and the parked poll takes it at once:
	// the exec's record is stored, its command, delivered in the step
	// that made it, never is.
	now = now.Add(time.Second)
	carryOut(p.Step(now, plane.EnqueueExec{WorkerID: workerID, Body: operator.ExecRequest{Command: "uptime"}}.Named(3)))

	// The next poll parks, and its timer fires with nothing to deliver.
	carryOut(p.Step(now, poll.Named(4)))
	now = timers[4]
	carryOut(p.Step(now, plane.PollDeadline{Req: 4}))

	// Output:
	// store 1 workers, 0 commands, 0 execs
	// reply 1: 200, a worker id
	// park 2 for 20s
	// store 0 workers, 0 commands, 1 execs
	// reply 2: 200, 1 commands
	// reply 3: 200, operator.ExecAccepted
	// park 4 for 20s
	// reply 4: 200, 0 commands
}
