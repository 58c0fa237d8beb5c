// Package sim is a deterministic discrete-event simulator of a nymph
// fleet: N wirecore/daemon machines and one wirecore/plane machine — the
// very state machines `nymph daemon` and `nymph serve` run — stepped in
// virtual time.
//
// A run is two logical processes that share nothing. The fleet holds
// every daemon machine and what its driver would (requests out, timers,
// the work it runs); the plane holds the plane machine, the operator and
// the plane's outages. Each pops its earliest event from its own calendar
// queue keyed by (time, origin, sequence number), steps the machine it is
// for, and turns the effects into later events or into Mail for the other
// side: a daemon's SendPoll becomes a mail that reaches the plane one
// network latency later and steps it with Poll, the plane's Reply a mail
// that reaches the daemon and steps it with PollResult, a Park becomes a
// PollDeadline at its Until, a StartExec becomes an ExecFinished after a
// drawn duration, a SetTimer becomes a TimerFired. Every random draw
// (latencies, losses, exec arrivals and durations, the daemons' backoff
// jitter, the plane's ids) comes from sources seeded by Scenario.Seed, one
// per side and purpose.
//
// No mail is due sooner than the latency distribution's floor after it
// was sent (the lookahead), so a side may step every event earlier than
// the other's next event plus the lookahead, and earlier than one
// lookahead after any of its own mail the other has not been handed yet;
// ties are broken by origin.
// The run is therefore a pure function of the Scenario however the two
// sides' steps interleave: Run steps them in one loop, and a driver
// outside the package (hostio/simloop) may step its Sides on two
// goroutines and get the same bytes.
//
// Like the cores, the package performs no I/O, reads no clock and starts
// no goroutine (wirecore/purity_test.go checks it), so it builds for
// js/wasm and gives the same output there. Reading scenario files,
// plotting and progress bars live in cmd/nymph.
package sim
