package identity

import (
	"errors"
	"time"
)

// DefaultMaxNonces bounds a NonceMemory: at a million remembered nonces a
// verifier holds about 100 MiB, and it would take over 8,000 signed
// requests a second, every second of the window, to fill it.
const DefaultMaxNonces = 1 << 20

// ErrReplayed says a nonce was already seen inside the window.
var ErrReplayed = errors.New("identity: nonce already used")

// ErrNonceMemoryFull says the verifier remembers as many nonces as it may:
// it refuses new ones rather than forget one that could still be replayed.
var ErrNonceMemoryFull = errors.New("identity: too many signed requests inside the replay window")

// NonceMemory remembers the nonces of accepted requests until their
// timestamps leave the window, so each is accepted once. Its memory is
// bounded by Max and by time: an entry is dropped once its timestamp is
// more than Window in the past. It is not safe for concurrent use.
type NonceMemory struct {
	// Max bounds the entries; zero means DefaultMaxNonces.
	Max int

	seen map[nonceKey]int64 // → timestamp
	// order is seen's keys in arrival order, for expiry; head is the
	// first live index.
	order []nonceKey
	head  int
}

// nonceKey scopes a nonce to its key: two daemons may draw the same
// nonce, only a key repeating its own is a replay.
type nonceKey struct {
	keyID, nonce string
}

// Use records nonce of keyID, signed at ts, at now. It fails with
// ErrReplayed when the pair is remembered, and ErrNonceMemoryFull when the
// memory is full of live entries. The caller checks Fresh first: a stale
// timestamp is never remembered.
func (m *NonceMemory) Use(keyID, nonce string, ts int64, now time.Time) error {
	m.expire(now)
	k := nonceKey{keyID, nonce}
	if _, ok := m.seen[k]; ok {
		return ErrReplayed
	}
	limit := m.Max
	if limit <= 0 {
		limit = DefaultMaxNonces
	}
	if len(m.seen) >= limit {
		return ErrNonceMemoryFull
	}
	if m.seen == nil {
		m.seen = make(map[nonceKey]int64)
	}
	m.seen[k] = ts
	m.order = append(m.order, k)
	return nil
}

// Len is how many nonces are remembered.
func (m *NonceMemory) Len() int { return len(m.seen) }

// expire drops entries whose timestamp left the window. Arrival order is
// not timestamp order (a timestamp may lead the clock by up to Window), so
// an entry goes when it is at the head and stale: one at the head that is
// still fresh holds back the entries behind it for at most two windows.
func (m *NonceMemory) expire(now time.Time) {
	// A timestamp before cutoff can never be Fresh again.
	cutoff := now.Unix() - int64(Window/time.Second)
	for m.head < len(m.order) {
		k := m.order[m.head]
		if ts, ok := m.seen[k]; ok && ts >= cutoff {
			break
		}
		delete(m.seen, k)
		m.order[m.head] = nonceKey{}
		m.head++
	}
	if m.head > 1024 && m.head*2 > len(m.order) {
		n := copy(m.order, m.order[m.head:])
		clear(m.order[n:])
		m.order = m.order[:n]
		m.head = 0
	}
}
