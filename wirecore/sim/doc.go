// Package sim is a deterministic discrete-event simulator of a nymph
// fleet: N wirecore/daemon machines and one wirecore/plane machine — the
// very state machines `nymph daemon` and `nymph serve` run — stepped in
// virtual time.
//
// One loop pops the earliest event from a binary heap keyed by (time,
// sequence number), steps the machine it is for, and turns the effects
// into later events: a daemon's SendPoll becomes the plane's Poll one
// network latency later, the plane's Reply becomes the daemon's
// PollResult one latency after that, a Park becomes a PollDeadline at its
// Until, a StartExec becomes an ExecFinished after a drawn duration, a
// SetTimer becomes a TimerFired. The sequence number breaks ties in the
// order events were scheduled, so the run is a pure function of the
// Scenario: every random draw (latencies, losses, exec arrivals and
// durations, the daemons' backoff jitter, the plane's ids) comes from
// sources seeded by Scenario.Seed.
//
// Like the cores, the package performs no I/O, reads no clock and starts
// no goroutine (wirecore/purity_test.go checks it), so it builds for
// js/wasm and gives the same output there. Reading scenario files,
// plotting and progress bars live in cmd/nymph.
package sim
