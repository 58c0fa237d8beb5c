// Package ulid encodes ULIDs: 48 bits of Unix milliseconds followed by 80
// bits of entropy, written as 26 Crockford base32 characters, so that ids
// sort by creation time. The daemon's provisional worker id, the control
// plane's command and invocation ids and the fifo client's request ids all
// use it.
//
// It decides the encoding only. Time and entropy come from the caller: the
// pure cores pass the event's time and their injected random source.
package ulid

import "time"

// alphabet is Crockford's base32: no I, L, O or U.
const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// Len is the length of every ULID String returns.
const Len = 26

// String encodes t (milliseconds, clamped to 0..2^48-1) and entropy.
func String(t time.Time, entropy [10]byte) string {
	ms := uint64(max(t.UnixMilli(), 0)) & (1<<48 - 1)
	hi := ms<<16 | uint64(entropy[0])<<8 | uint64(entropy[1])
	var lo uint64
	for _, c := range entropy[2:] {
		lo = lo<<8 | uint64(c)
	}
	var out [Len]byte
	// 128 bits in 26 groups of 5 bits, the first group holding 3 bits.
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
