// Package daemon is the daemon's state machine: every decision the daemon
// makes in protocol "1" (docs/protocol.md, "Hello", "Poll", "Commands",
// "Ack": boot, hello, the poll loop, backoff, concurrency, idle policy, the
// seven command kinds, drain) and nothing else.
//
// A driver feeds it events — a hello or poll result, an exec or run that
// finished, a timer that fired, a signal — together with the current time,
// and gets back effects: send this poll, start this exec, post this ack, arm
// this timer, exit with this code. The machine performs no I/O, reads no
// clock, starts no goroutine and draws randomness only from the Rand it is
// given, so the same events always give the same effects. That is what lets
// transcript tests pin its behaviour with a fake clock, and what lets it
// build for GOOS=js and GOOS=wasip1.
//
// It does not decide how bytes reach the control plane (hostio/transport),
// how an exec or a run is carried out (hostio, runners), or how the
// configuration file is read. It does decide which runner kind a run uses,
// what every ack and poll request contains, and when the daemon exits.
//
// Where the protocol is silent, the machine decides as follows (transcripts
// in testdata pin each; docs/protocol.md, "Decisions on points the spec
// leaves open", has the wire-level ones):
//   - A cancelled poll's late response is still run: the control plane
//     handed those commands out when it answered. If that late work takes
//     the last permit, the poll parked meanwhile is cancelled too.
//   - Runs, like execs, are held locally when no permit is free, and start
//     in arrival order as permits free. An exec or run whose id is already
//     running or held is a redelivery and is skipped.
//   - A hello answered with another 4xx than 408/429 (a bad bearer, a wrong
//     URL) exits 2 like a 422; an accepted hello resets the backoff.
//   - A poll answered 404 unknown_worker waits the usual backoff, then says
//     hello again (keeping the worker id until hello names another).
//   - updated_capabilities rides on every poll until one carrying it
//     succeeds, so a failed poll does not lose the snapshot.
//   - During a drain, held work still starts as permits free (it was
//     claimed before the signal); commands of a poll that raced the signal
//     are answered without running (exec exit_code -1, run and setup acked
//     killed) with the message "daemon shutting down". When the grace
//     expires, work never started is answered the same way with "daemon
//     shutdown grace expired". A third signal exits 1.
//   - Config.KeepPollOnWake (set for a transport that cannot withdraw a
//     request in flight: the fifo and spool relays) never cancels a parked
//     poll to wake the loop: a finished exec or setup waits for the parked
//     poll's reply, which the control plane sends on the result or ack,
//     and polls again right after it; a refresh setup acks once detection
//     is back. A drain waits for that reply too (within grace_s) and
//     answers its commands as above; the grace expiring or a second signal
//     withdraws the poll.
//
// The driver contract, in short: call Step with Boot once, then with one
// event at a time, in the order things happened; carry out the returned
// effects in order; feed back exactly the events each effect documents.
// Example (example_test.go) is that loop in a page; hostio/daemonloop is
// the real one.
package daemon
