// Package testscripts holds end-to-end tests of the real nymph binary,
// written as .txtar scripts under testdata/ (rogpeppe/go-internal/testscript).
// Each script is what a user types; the harness adds a few commands for
// readiness waits so that no script sleeps.
package testscripts
