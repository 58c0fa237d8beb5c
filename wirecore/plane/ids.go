package plane

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"time"
)

// random fills b from the configured entropy source. The plane cannot make
// an id without it, and an id made from anything predictable would let a
// stranger post to an exec's result URL, so a failing source is fatal.
func (p *Plane) random(b []byte) {
	if _, err := io.ReadFull(p.cfg.Entropy, b); err != nil {
		panic(fmt.Sprintf("plane: entropy source failed: %v", err))
	}
}

// newWorkerID returns a 24-hex-digit id shaped like an ObjectId: 4 bytes
// of creation time (seconds), 8 random bytes.
func (p *Plane) newWorkerID(now time.Time) string {
	var b [12]byte
	binary.BigEndian.PutUint32(b[:4], uint32(now.Unix()))
	p.random(b[4:])
	return hex.EncodeToString(b[:])
}

// newExecID returns 32 hex digits of entropy: the exec id is the only
// credential of its result and chunk URLs.
func (p *Plane) newExecID() string {
	var b [16]byte
	p.random(b[:])
	return hex.EncodeToString(b[:])
}

// crockford is the ULID alphabet.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newULID returns a ULID: 48 bits of milliseconds, 80 random bits,
// 26 Crockford base32 characters. Command and invocation ids and session
// tokens are ULIDs, so they sort by creation time.
func (p *Plane) newULID(now time.Time) string {
	var b [16]byte
	ms := uint64(max(now.UnixMilli(), 0))
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	p.random(b[6:])
	return encodeULID(b)
}

func encodeULID(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	// 128 bits in 26 groups of 5 bits, the first group holding 3 bits.
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// nextSeq orders commands and invocations oldest first.
func (p *Plane) nextSeq() uint64 {
	p.seq++
	return p.seq
}
