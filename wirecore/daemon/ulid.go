package daemon

import "time"

// crockford is the ULID alphabet (Crockford's base32: no I, L, O, U).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ulidString encodes a ULID: 48 bits of Unix milliseconds, then 80 random
// bits, as 26 Crockford base32 characters, most significant first. It is
// written out here rather than imported because the machine must draw its
// randomness from Rand and its time from the event, never from a package
// default.
func ulidString(t time.Time, rnd Rand) string {
	ms := uint64(t.UnixMilli()) & (1<<48 - 1)
	r1, r2 := rnd.Uint64(), rnd.Uint64()
	hi := ms<<16 | r1>>48 // 48 time bits + the first 16 random bits
	lo := r2              // the remaining 64 random bits
	var out [26]byte
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
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
