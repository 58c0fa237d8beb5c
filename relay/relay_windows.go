package relay

import (
	"context"
	"errors"
)

// errNeedsPOSIX is what the relay says on Windows: it pumps named FIFOs
// (mkfifo) on Go's poller, and opens every pipe and spool file beneath
// its prefix with openat and O_NOFOLLOW; Windows has none of these.
var errNeedsPOSIX = errors.New("relay: the relay needs a POSIX system (named FIFOs, openat beneath the prefix); run it on Linux or macOS, and have Windows daemons talk to the control plane directly")

// Relay cannot be made on Windows: New refuses.
type Relay struct{}

// New refuses on Windows (errNeedsPOSIX).
func New(Config) (*Relay, error) { return nil, errNeedsPOSIX }

// Run refuses on Windows (errNeedsPOSIX).
func (*Relay) Run(context.Context) error { return errNeedsPOSIX }

// Ready is never closed on Windows: the relay never starts.
func (*Relay) Ready() <-chan struct{} { return nil }

// ServeStatus refuses on Windows (errNeedsPOSIX).
func (*Relay) ServeStatus(context.Context, string) error { return errNeedsPOSIX }

// RaiseFileLimit says Windows has no RLIMIT_NOFILE to raise.
func RaiseFileLimit() (uint64, error) {
	return 0, errors.New("relay: Windows has no open-file limit to raise")
}

// FileBudget knows no open-file limit on Windows.
func FileBudget() (limit, budget int64, ok bool) { return 0, 0, false }

// InspectPrefix refuses on Windows (errNeedsPOSIX): the rules it checks
// are those of a relay, which cannot run here.
func InspectPrefix(string, bool) (PrefixReport, error) { return PrefixReport{}, errNeedsPOSIX }

// InspectMachine refuses on Windows (errNeedsPOSIX), as InspectPrefix.
func InspectMachine(string, bool) (PrefixReport, error) { return PrefixReport{}, errNeedsPOSIX }
