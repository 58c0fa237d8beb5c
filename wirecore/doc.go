// Package wirecore is the pure protocol core of nymph; its sub-packages hold
// the wire types and codecs (wire), framing (frame), the state machines of
// the daemon and the control plane, and the simulator (sim) that steps
// both in virtual time.
//
// This package itself holds no code. It owns the rule every sub-package
// follows, and the test that enforces it (purity_test.go): no non-test
// file under wirecore/ imports os, net, net/http, os/exec, os/signal,
// syscall, golang.org/x/sys or math/rand, uses math/rand/v2's global
// generator, reads the clock or arms a timer through package time (Now,
// Since, Until, Sleep, After, Tick, NewTimer, NewTicker, AfterFunc), or
// starts a goroutine. Time and randomness come in as values, effects go out
// as values, so the core runs unchanged inside a request handler, under a
// fake clock in tests, and under WebAssembly (js and wasip1).
//
// It does not decide anything about the protocol.
package wirecore
