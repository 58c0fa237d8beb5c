package plane

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Auth is what the host read of a daemon request's credentials; the plane
// decides what they allow. The zero value is a request that proved
// nothing: no signature, no bearer.
type Auth struct {
	// Sig is the request's parsed signature headers (identity.
	// ParseSignature); nil when it carries none.
	Sig *identity.Signature
	// Req is what the signature covers: the method, the request's path
	// and the SHA-256 of the body as read.
	Req identity.Request
	// EnrollSecret is a hello's identity.HeaderEnrollToken: the secret
	// half of a join token.
	EnrollSecret string
	// NewKeySig is a key rotation's identity.HeaderNewKeySignature, as
	// sent (base64url of the new key's signature).
	NewKeySig string
	// Bearer is true when the request carried a valid daemon bearer,
	// directly or through a relay that carries or vouches for it (or the
	// control plane takes daemon requests without one).
	Bearer bool
}

// Codes of the {error, message} bodies that refuse a daemon request for
// its credentials (docs/protocol.md, "Request signatures"). Hello refuses
// with the protocol's reject codes instead, but for key_revoked.
const (
	// ErrBearerRequired (401): unsigned, and no valid daemon bearer.
	ErrBearerRequired = "bearer_required"
	// ErrSignatureRequired (401): the worker acted for has an enrolled
	// key, and the request is unsigned.
	ErrSignatureRequired = "signature_required"
	// ErrEnrollmentSignatureRequired (401): Config.RequireSignatures, and
	// the request is unsigned (the hello reject of the same code).
	ErrEnrollmentSignatureRequired = wire.RejectEnrollmentSignatureRequired
	// ErrMalformedSignature (401): a signature header is malformed; the
	// host answers it, with the header's error as the message.
	ErrMalformedSignature = "malformed_signature"
	// ErrUnknownKey (401): no worker holds the key that signed.
	ErrUnknownKey = "unknown_key"
	// ErrKeyRevoked (401): an operator revoked the key that signed. A
	// daemon stops on it: only a new join token brings its host back.
	ErrKeyRevoked = wire.ErrKeyRevoked
	// ErrSignatureExpired (401): the timestamp is more than
	// identity.Window from the control plane's clock.
	ErrSignatureExpired = "signature_expired"
	// ErrWrongAudience (401): signed for another control plane.
	ErrWrongAudience = "wrong_audience"
	// ErrSignatureInvalid (401): the signature does not verify.
	ErrSignatureInvalid = "signature_invalid"
	// ErrNonceReplayed (401): the key used the nonce already.
	ErrNonceReplayed = "nonce_replayed"
	// ErrNonceMemoryFull (503): too many signed requests inside the
	// window to remember another nonce.
	ErrNonceMemoryFull = "nonce_memory_full"
	// ErrWorkerMismatch (403): signed by one worker's key, acting for
	// another worker.
	ErrWorkerMismatch = "worker_mismatch"
	// ErrEnrollRateLimited (429): too many enrolling hellos from one
	// peer; the host answers it.
	ErrEnrollRateLimited = "enroll_rate_limited"
)

// Forgery, on a Reply, says the request was refused for acting for a
// worker other than the one whose key signed it: the host logs both.
type Forgery struct {
	Signer string // the worker whose key signed
	Target string // the worker it acted for ("" when none)
	What   string // the request, in words ("poll", "ack of invocation X")
}

// DaemonRequest is a daemon route's Request, which carries the Auth the
// host read.
type DaemonRequest interface {
	Request
	Authed(a Auth) DaemonRequest
}

// authStatus is the status each refusal code goes out with.
func authStatus(code string) int {
	switch code {
	case ErrWorkerMismatch:
		return StatusForbidden
	case ErrNonceMemoryFull:
		return StatusServiceUnavailable
	}
	return StatusUnauthorized
}

// refuse answers req with a credentials refusal.
func (p *Plane) refuse(req RequestID, code, msg string) {
	r := Reply{Req: req, Status: authStatus(code), Body: ErrorBody{Error: code, Message: msg}}
	if code == ErrNonceMemoryFull {
		r.RetryAfterS = 1
	}
	p.replies = append(p.replies, r)
}

// keyed reports whether only signed requests may act for w: it has a
// key, or had one revoked and has not joined again.
func (w *worker) keyed() bool { return w.rec.KeyID != "" || w.rec.KeyRevoked }

// signer is the worker whose key signed a request; prev is true when it
// was the key the worker rotated from.
type signer struct {
	w    *worker
	prev bool
}

// verify checks a signed request against the key its key id names: that
// key must be a worker's current key, or its previous one for
// identity.Window after a rotation. The failure is a code and a message.
func (p *Plane) verify(now time.Time, a *Auth) (signer, string, string) {
	s := a.Sig
	id, ok := p.byKey[s.KeyID]
	if !ok {
		if owner, gone := p.revoked[s.KeyID]; gone {
			return signer{}, ErrKeyRevoked, fmt.Sprintf(
				"key %s of worker %s was revoked; its host joins again with a new token (nymph ctl token)", s.KeyID, owner)
		}
		return signer{}, ErrUnknownKey, fmt.Sprintf("key %s is not enrolled on this control plane", s.KeyID)
	}
	w := p.workers[id]
	by := signer{w: w}
	pub := w.pub
	if s.KeyID != w.rec.KeyID {
		if now.Sub(w.rec.RotatedAt) > identity.Window {
			return signer{}, ErrUnknownKey, fmt.Sprintf("key %s of worker %s was replaced by %s at %s; sign with the new key",
				s.KeyID, w.ID(), w.rec.KeyID, w.rec.RotatedAt.UTC().Format(time.RFC3339))
		}
		by.prev, pub = true, w.prevPub
	}
	if code, msg := p.checkSigned(now, pub, a); code != "" {
		return signer{}, code, msg
	}
	return by, "", ""
}

// checkSigned checks a's signature under pub: its timestamp, audience,
// the signature itself, and last its nonce, so that only a request that
// verified takes room in the nonce memory.
func (p *Plane) checkSigned(now time.Time, pub ed25519.PublicKey, a *Auth) (string, string) {
	s := a.Sig
	if !identity.Fresh(s.Timestamp, now) {
		off, side := s.Timestamp-now.Unix(), "ahead of"
		if off < 0 {
			off, side = -off, "behind"
		}
		return ErrSignatureExpired, fmt.Sprintf(
			"signed at %d, %d s %s this control plane's clock (%d); a signature is good for %s either way: check the host's clock",
			s.Timestamp, off, side, now.Unix(), identity.Window)
	}
	if p.cfg.Audience != "" && s.Audience != p.cfg.Audience && !slices.Contains(p.cfg.OtherAudiences, s.Audience) {
		return ErrWrongAudience, fmt.Sprintf("signed for %q; this control plane is %q", s.Audience, p.cfg.Audience)
	}
	if !identity.Verify(pub, a.Req, s) {
		return ErrSignatureInvalid, fmt.Sprintf("the signature of key %s does not verify over %s %s and its body",
			s.KeyID, a.Req.Method, a.Req.Path)
	}
	switch err := p.nonces.Use(s.KeyID, s.Nonce, s.Timestamp, now); {
	case errors.Is(err, identity.ErrReplayed):
		return ErrNonceReplayed, fmt.Sprintf("key %s used nonce %s already: a signed request is accepted once", s.KeyID, s.Nonce)
	case err != nil:
		return ErrNonceMemoryFull, "too many signed requests inside the replay window; retry in a second"
	}
	return "", ""
}

// caller authenticates a daemon request other than hello: the worker
// whose key signed it, nil for a bearer request. false means it was
// refused (and answered).
func (p *Plane) caller(now time.Time, req RequestID, a *Auth) (*worker, bool) {
	if a.Sig == nil {
		switch {
		case p.cfg.RequireSignatures:
			p.refuse(req, ErrEnrollmentSignatureRequired,
				"this control plane takes signed requests only (nymph serve --require-signatures): join the host with a token from nymph ctl token")
			return nil, false
		case !a.Bearer:
			p.refuse(req, ErrBearerRequired, "the request is neither signed nor carries a valid daemon bearer")
			return nil, false
		}
		return nil, true
	}
	by, code, msg := p.verify(now, a)
	if code != "" {
		p.refuse(req, code, msg)
		return nil, false
	}
	return by.w, true
}

// actsFor holds a request to the worker it acts for (targetID, "" when
// none): one signed by a worker's key acts for that worker only, and a
// worker with a key is acted for by signed requests only, and a worker
// the plane does not have is acted for by nobody (404 unknown_worker). by
// is the signer (nil: a bearer request); what names the request in
// messages.
func (p *Plane) actsFor(req RequestID, by *worker, targetID, what string) bool {
	return p.actsForWorker(req, by, p.workers[targetID], targetID, what)
}

// actsForWorker is actsFor with the target already looked up (nil: no
// such worker), for the poll, which needs it next anyway. When it holds,
// target is nil only for an empty targetID.
func (p *Plane) actsForWorker(req RequestID, by, target *worker, targetID, what string) bool {
	if by != nil {
		if by.ID() == targetID {
			return true
		}
		target := "worker " + targetID
		if targetID == "" {
			target = "no worker"
		}
		p.replies = append(p.replies, Reply{Req: req, Status: StatusForbidden,
			Body: ErrorBody{Error: ErrWorkerMismatch, Message: fmt.Sprintf(
				"signed by the key of worker %s, but the %s is for %s: a worker's key acts for that worker only", by.ID(), what, target)},
			Forgery: &Forgery{Signer: by.ID(), Target: targetID, What: what}})
		return false
	}
	if target == nil && targetID != "" {
		// A forgotten worker's record took with it what said who may act
		// for it (its key): were it taken as a worker without one, any
		// bearer holder could settle the runs and execs it left behind.
		p.reply(req, StatusNotFound, ErrorBody{Error: ErrUnknownWorker,
			Message: fmt.Sprintf("the %s is for worker %s, which this plane does not know (never registered, or forgotten)", what, targetID)})
		return false
	}
	if t := target; t != nil && t.keyed() {
		msg := fmt.Sprintf("worker %s has an enrolled key: the %s must be signed by it", targetID, what)
		if t.rec.KeyRevoked {
			msg = fmt.Sprintf("the key of worker %s was revoked: the %s must be signed, by a key its host joins with again (nymph ctl token)", targetID, what)
		}
		p.refuse(req, ErrSignatureRequired, msg)
		return false
	}
	return true
}

func (p *Plane) onAuthenticate(now time.Time, e Authenticate) {
	if _, ok := p.caller(now, e.Req, &e.Auth); ok {
		p.reply(e.Req, StatusOK, OK{})
	}
}
