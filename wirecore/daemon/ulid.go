package daemon

import (
	"encoding/binary"
	"time"

	"github.com/nymphd/nymph/wirecore/ulid"
)

// ulidString draws the ULID's 80 random bits from rnd (the machine never
// reads a package-default source) and its time from the event.
func ulidString(t time.Time, rnd Rand) string {
	var e [10]byte
	binary.BigEndian.PutUint16(e[:2], uint16(rnd.Uint64()>>48))
	binary.BigEndian.PutUint64(e[2:], rnd.Uint64())
	return ulid.String(t, e)
}

// provisionalWorkerID is {machine_id}-{ULID}, the worker id the daemon uses
// until hello returns a canonical one; machine_id "auto" or "" means the
// hostname.
func provisionalWorkerID(machineID, hostname string, t time.Time, rnd Rand) string {
	return resolveMachineID(machineID, hostname) + "-" + ulidString(t, rnd)
}

// resolveMachineID applies the "auto"/empty rule of [daemon] machine_id.
func resolveMachineID(machineID, hostname string) string {
	if machineID == "" || machineID == "auto" {
		return hostname
	}
	return machineID
}
