package daemon_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// The loop a driver writes around the machine: it steps Boot, then one
// event at a time with the time it happened, and carries out the effects
// in order — here by answering each at once, as a control plane and a
// shell would. hostio/daemonloop is this loop with real transports,
// processes, timers and signals, fed from one goroutine.
func Example() {
	cfg := daemon.DefaultConfig()
	cfg.MachineID, cfg.Hostname, cfg.Workdir = "m1", "box", "/var/lib/nymph"
	cfg.Runners = []string{wire.RunnerProcess}
	// A driver seeds its Rand from the OS; a fixed seed keeps this
	// example's jitter and ids the same on every run.
	m := daemon.New(cfg, rand.New(rand.NewPCG(1, 2)))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	worker := "w-1"
	exec, _ := (&wire.Exec{ExecID: "e1", Command: "uptime"}).MarshalMsg(nil)
	queued := []wire.Command{{ID: "c1", Kind: wire.KindExec, Body: exec}}

	events := []daemon.Event{daemon.Boot{}}
	exited, signalled := false, false
	for !exited {
		if len(events) == 0 {
			if signalled {
				break
			}
			// Nothing more happens by itself: the daemon's poll is
			// parked. The operator stops it.
			fmt.Println("SIGTERM")
			events, signalled = append(events, daemon.Signal{Kind: daemon.SignalTerm}), true
		}
		ev := events[0]
		events = events[1:]
		for _, eff := range m.Step(now, ev) {
			switch e := eff.(type) {
			case daemon.SendHello:
				fmt.Println("hello as", e.Request.MachineID)
				events = append(events, daemon.HelloResult{Status: 200, Response: &wire.HelloResponse{WorkerID: &worker}})
			case daemon.SendPoll:
				fmt.Println("poll", e.Seq, "as", e.Request.WorkerID)
				if len(queued) == 0 {
					continue // the control plane parks it
				}
				events = append(events, daemon.PollResult{Seq: e.Seq, Status: 200, Response: &wire.PollResponse{Commands: queued}})
				queued = nil
			case daemon.StartExec:
				fmt.Println("run", e.Exec.Command)
				events = append(events, daemon.ExecFinished{ExecID: e.Exec.ExecID, Result: wire.ExecResult{Stdout: "up 3 days\n"}})
			case daemon.CancelPoll:
				fmt.Println("cancel poll", e.Seq)
			case daemon.PostExecResult:
				fmt.Printf("post result of %s: %q\n", e.ExecID, e.Result.Stdout)
				events = append(events, daemon.ResultPosted{ExecID: e.ExecID, Status: 200})
			case daemon.Exit:
				fmt.Println("exit", e.Code, e.Reason)
				exited = true
			}
		}
	}
	// A finished exec wakes the loop: its result is posted and the parked
	// poll 2 is replaced by poll 3, so a next exec does not wait out a
	// whole long-poll.

	// Output:
	// hello as m1
	// poll 1 as w-1
	// run uptime
	// poll 2 as w-1
	// post result of e1: "up 3 days\n"
	// cancel poll 2
	// poll 3 as w-1
	// SIGTERM
	// cancel poll 3
	// exit 0 drained after signal term
}
