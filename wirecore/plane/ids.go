package plane

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/nymphd/nymph/wirecore/ulid"
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

// newULID returns a ULID of now and 80 random bits. Command and invocation
// ids and session tokens are ULIDs, so they sort by creation time.
func (p *Plane) newULID(now time.Time) string {
	var e [10]byte
	p.random(e[:])
	return ulid.String(now, e)
}

// nextSeq orders commands and invocations oldest first.
func (p *Plane) nextSeq() uint64 {
	p.seq++
	return p.seq
}
