package plane

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Join token policy.
const (
	// DefaultTokenTTL is how long a token minted without a TTL redeems.
	DefaultTokenTTL = 15 * time.Minute
	// MaxTokenTTL bounds a token's life: a token is a credential to
	// copy once, not to keep.
	MaxTokenTTL = 7 * 24 * time.Hour
	// MaxTokenFailures is how many failed hellos burn a token: someone
	// guessing at the signature with a leaked secret gets that many tries.
	MaxTokenFailures = 5
)

func cloneToken(t TokenRecord) TokenRecord {
	t.Tags = slices.Clone(t.Tags)
	return t
}

func (p *Plane) restoreTokens(list []TokenRecord) {
	ts := slices.Clone(list)
	slices.SortFunc(ts, func(a, b TokenRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	for i := range ts {
		p.addToken(cloneToken(ts[i]))
	}
}

func (p *Plane) addToken(t TokenRecord) *TokenRecord {
	rec := &t
	p.tokens[t.ID] = rec
	p.tokenByHash[t.SecretHash] = rec
	p.tokenOrder = append(p.tokenOrder, t.ID)
	return rec
}

func (p *Plane) onCreateToken(now time.Time, e CreateToken) {
	if problem := checkToken(&e); problem != "" {
		p.opError(e.Req, StatusBadRequest, "token: %s", problem)
		return
	}
	if p.tokenByHash[e.SecretHash] != nil {
		p.opError(e.Req, StatusConflict, "token: a token with this secret exists already; draw another")
		return
	}
	ttl := e.TTL
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	t := p.addToken(TokenRecord{ID: p.newULID(now), SecretHash: e.SecretHash, Queue: e.Queue, Tags: slices.Clone(e.Tags),
		CreatedAt: now, ExpiresAt: now.Add(ttl)})
	p.putToken(t)
	p.reply(e.Req, StatusOK, operator.TokenCreated{ID: t.ID, ExpiresAt: t.ExpiresAt})
}

// checkToken says what is wrong with a token request, "" when nothing.
func checkToken(e *CreateToken) string {
	if b, err := hex.DecodeString(e.SecretHash); err != nil || len(b) != 32 || strings.ToLower(e.SecretHash) != e.SecretHash {
		return "the secret hash is not 64 lowercase hex digits"
	}
	if e.TTL < 0 || e.TTL > MaxTokenTTL {
		return fmt.Sprintf("ttl %s: want more than 0 and at most %s", e.TTL, MaxTokenTTL)
	}
	if v := wire.CheckText("queue", e.Queue, wire.MaxQueueBytes); v != nil {
		return v.Message
	}
	if v := wire.CheckTexts("tags", e.Tags, wire.MaxTags, wire.MaxTagBytes); v != nil {
		return v.Message
	}
	for _, t := range e.Tags {
		if k, _, ok := strings.Cut(t, "="); !ok || k == "" {
			return fmt.Sprintf("tag %q: want key=value", t)
		}
	}
	return ""
}

func (p *Plane) onListTokens(now time.Time, e ListTokens) {
	out := make([]operator.Token, 0, len(p.tokenOrder))
	for _, id := range p.tokenOrder {
		t := p.tokens[id]
		out = append(out, operator.Token{ID: t.ID, Queue: t.Queue, Tags: nonNil(slices.Clone(t.Tags)), State: tokenState(t, now),
			CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, WorkerID: t.WorkerID, Failures: t.Failures})
	}
	p.reply(e.Req, StatusOK, out)
}

func tokenState(t *TokenRecord, now time.Time) string {
	switch {
	case !t.RedeemedAt.IsZero():
		return operator.TokenRedeemed
	case !t.BurnedAt.IsZero():
		return operator.TokenBurned
	case !now.Before(t.ExpiresAt):
		return operator.TokenExpired
	}
	return operator.TokenUnused
}

// tokenFailed counts a failed hello against t, burning it at the last
// allowed failure.
func (p *Plane) tokenFailed(t *TokenRecord, now time.Time) {
	t.Failures++
	if t.Failures >= MaxTokenFailures {
		t.BurnedAt = now
	}
	p.putToken(t)
}

// pinTags is a hello's tags with the token's over them: a daemon's tag
// whose key a pinned tag has is dropped, so a daemon cannot shed or
// override what the operator gave its host.
func pinTags(own, pinned []string) []string {
	if len(pinned) == 0 {
		return slices.Clone(own)
	}
	out := make([]string, 0, len(own)+len(pinned))
	for _, t := range own {
		k, _, _ := strings.Cut(t, "=")
		if !slices.ContainsFunc(pinned, func(pt string) bool { pk, _, _ := strings.Cut(pt, "="); return pk == k }) {
			out = append(out, t)
		}
	}
	return append(out, pinned...)
}

// pinQueue is a hello's lanes with the token's queue among them.
func pinQueue(lanes []string, pinned string) []string {
	out := slices.Clone(lanes)
	if pinned != "" && !slices.Contains(out, pinned) {
		out = append(out, pinned)
	}
	return out
}
