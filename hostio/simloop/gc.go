package simloop

import (
	"os"
	"runtime/debug"
)

// GCPercent is the collector's target (GOGC) for a simulation run. A run
// allocates short-lived values over a large heap that lives as long as
// the run (every daemon's machine, the plane's worker records), and each
// collection marks all of that heap: a laxer target trades memory,
// which such a run has to spare, for fewer collections; 300 keeps the
// peak of 100,000 daemons well inside 4 GiB (docs/architecture.md,
// "Scale", has the figures).
const GCPercent = 300

// TuneGC sets the collector's target to GCPercent, unless the
// environment's GOGC chose one, and returns what restores the target
// before. The target is the process's, so Run leaves it to its caller:
// nymph sim calls it once, this package's BenchmarkSteady around its
// runs.
func TuneGC() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	before := debug.SetGCPercent(GCPercent)
	return func() { debug.SetGCPercent(before) }
}
