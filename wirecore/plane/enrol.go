package plane

import (
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

// enrolment is a key a hello proved and a token admitted, to be given to
// the hello's worker in the same Step as the token's redemption.
type enrolment struct {
	tok   *TokenRecord
	keyID string
	pub   ed25519.PublicKey
	enc   string
}

// rejectHello answers a hello 200 with a reject, as the protocol has it.
func (p *Plane) rejectHello(now time.Time, req RequestID, code, format string, args ...any) {
	resp := p.helloResponse(now, nil)
	resp.Reject = &wire.Reject{Code: code, Message: fmt.Sprintf(format, args...)}
	p.reply(req, StatusOK, resp)
}

// helloAuth decides whether a hello may speak for its machine, and what
// key it enrols. false means it answered the hello (a reject or a
// refusal).
func (p *Plane) helloAuth(now time.Time, e *Hello) (*enrolment, bool) {
	if e.Auth.EnrollSecret != "" {
		return p.enrolling(now, e)
	}
	w := p.workers[p.byMachine[e.Body.MachineID]]
	if w != nil && w.keyed() {
		return nil, p.keyedHello(now, e, w)
	}
	return nil, p.unkeyedHello(now, e)
}

// unkeyedHello admits the hello of a machine without a key: a bearer
// hello, unless signatures are required. A public key or a signature
// with no token to enrol it is refused.
func (p *Plane) unkeyedHello(now time.Time, e *Hello) bool {
	a, h := &e.Auth, &e.Body
	switch {
	case h.PublicKey != nil && *h.PublicKey != "":
		p.rejectHello(now, e.Req, wire.RejectEnrollTokenRequired,
			"machine %q has no enrolled key and the hello carries public_key but no %s: a key is enrolled with a join token (nymph ctl token)",
			h.MachineID, identity.HeaderEnrollToken)
	case a.Sig != nil:
		p.signedByStranger(now, e)
	case p.cfg.RequireSignatures:
		p.rejectHello(now, e.Req, wire.RejectEnrollmentSignatureRequired,
			"this control plane takes signed requests only (nymph serve --require-signatures): join the host with a token from nymph ctl token")
	case !a.Bearer:
		p.refuse(e.Req, ErrBearerRequired, "the hello is neither signed nor carries a valid daemon bearer or a join token")
	default:
		return true
	}
	return false
}

// signedByStranger refuses a signed hello of a machine without a key:
// the key is another worker's, revoked, or no one's.
func (p *Plane) signedByStranger(now time.Time, e *Hello) {
	id, machine := e.Auth.Sig.KeyID, e.Body.MachineID
	if owner, gone := p.revoked[id]; gone {
		p.refuse(e.Req, ErrKeyRevoked, fmt.Sprintf("key %s of worker %s was revoked; join with a new token (nymph ctl token)", id, owner))
		return
	}
	if owner, ok := p.byKey[id]; ok {
		p.rejectHello(now, e.Req, wire.RejectKeyIDMismatch, "key %s is worker %s's (machine %q), not machine %q's",
			id, owner, p.workers[owner].rec.MachineID, machine)
		return
	}
	p.rejectHello(now, e.Req, wire.RejectEnrollTokenRequired,
		"key %s is not enrolled on this control plane: a key is enrolled with a join token (nymph ctl token)", id)
}

// keyedHello admits the hello of a machine with a key only when that key
// signed it: an unsigned hello naming the machine is the takeover the
// key exists to stop.
func (p *Plane) keyedHello(now time.Time, e *Hello, w *worker) bool {
	a, h := &e.Auth, &e.Body
	if w.rec.KeyRevoked {
		if a.Sig != nil && p.revoked[a.Sig.KeyID] == w.ID() {
			p.refuse(e.Req, ErrKeyRevoked, fmt.Sprintf("key %s of worker %s was revoked; join with a new token (nymph ctl token)", a.Sig.KeyID, w.ID()))
			return false
		}
		p.rejectHello(now, e.Req, wire.RejectEnrollTokenRequired,
			"the key of worker %s (machine %q) was revoked: the host joins again with a new token (nymph ctl token)", w.ID(), h.MachineID)
		return false
	}
	if a.Sig == nil {
		p.rejectHello(now, e.Req, wire.RejectEnrollSignatureRequired,
			"machine %q is worker %s, enrolled with key %s: its hello must be signed by that key, or carry a new join token",
			h.MachineID, w.ID(), w.rec.KeyID)
		return false
	}
	pubID := ""
	if h.PublicKey != nil && *h.PublicKey != "" {
		pub, err := identity.DecodePublicKey(*h.PublicKey)
		if err != nil {
			p.rejectHello(now, e.Req, wire.RejectKeyIDMismatch, "%v", err)
			return false
		}
		if pubID = identity.KeyID(pub); pubID != w.rec.KeyID && pubID != w.rec.PrevKeyID {
			p.rejectHello(now, e.Req, wire.RejectEnrollTokenRequired,
				"public_key is key %s, not worker %s's key %s: a new key is enrolled with a join token, or by a rotation",
				pubID, w.ID(), w.rec.KeyID)
			return false
		}
	}
	return p.keyedHelloSigned(now, e, w, pubID)
}

// keyedHelloSigned verifies the signature of a keyed machine's hello.
func (p *Plane) keyedHelloSigned(now time.Time, e *Hello, w *worker, pubID string) bool {
	a := &e.Auth
	by, code, msg := p.verify(now, a)
	switch code {
	case "":
	case ErrKeyRevoked, ErrNonceMemoryFull:
		p.refuse(e.Req, code, msg)
		return false
	case ErrUnknownKey:
		p.rejectHello(now, e.Req, wire.RejectKeyIDMismatch, "%s; machine %q is worker %s, key %s", msg, e.Body.MachineID, w.ID(), w.rec.KeyID)
		return false
	default:
		p.rejectHello(now, e.Req, wire.RejectEnrollSignatureInvalid, "%s: %s", code, msg)
		return false
	}
	if by.w != w {
		resp := p.helloResponse(now, nil)
		resp.Reject = &wire.Reject{Code: wire.RejectKeyIDMismatch, Message: fmt.Sprintf(
			"signed by the key of worker %s, but machine %q is worker %s: a worker's key acts for that worker only",
			by.w.ID(), e.Body.MachineID, w.ID())}
		p.replies = append(p.replies, Reply{Req: e.Req, Status: StatusOK, Body: resp,
			Forgery: &Forgery{Signer: by.w.ID(), Target: w.ID(), What: "hello of machine " + e.Body.MachineID}})
		return false
	}
	if pubID != "" && pubID != a.Sig.KeyID {
		p.rejectHello(now, e.Req, wire.RejectKeyIDMismatch, "signed by key %s; public_key is key %s", a.Sig.KeyID, pubID)
		return false
	}
	return true
}

// enrolling checks a hello that carries a join token: the token must be
// one this plane minted, unused, unexpired and unburned; the hello must
// carry a key and be signed by it. A failure with a known token counts
// against it.
func (p *Plane) enrolling(now time.Time, e *Hello) (*enrolment, bool) {
	var tok *TokenRecord
	if identity.ValidSecret(e.Auth.EnrollSecret) == nil {
		tok = p.tokenByHash[identity.SecretHash(e.Auth.EnrollSecret)]
	}
	switch {
	case tok == nil:
		p.rejectHello(now, e.Req, wire.RejectInvalidEnrollToken,
			"the join token is not one this control plane minted: copy the whole line nymph ctl token printed")
	case !tok.BurnedAt.IsZero():
		p.rejectHello(now, e.Req, wire.RejectEnrollTokenConsumed,
			"join token %s was burned after %d failed attempts: mint a new one (nymph ctl token)", tok.ID, tok.Failures)
	case !tok.RedeemedAt.IsZero():
		p.rejectHello(now, e.Req, wire.RejectEnrollTokenConsumed,
			"join token %s was redeemed by worker %s at %s: a token enrols one host", tok.ID, tok.WorkerID, tok.RedeemedAt.UTC().Format(time.RFC3339))
	case !now.Before(tok.ExpiresAt):
		p.rejectHello(now, e.Req, wire.RejectEnrollTokenExpired,
			"join token %s expired at %s: mint a new one (nymph ctl token --ttl)", tok.ID, tok.ExpiresAt.UTC().Format(time.RFC3339))
	default:
		return p.enrolProof(now, e, tok)
	}
	return nil, false
}

// enrolProof checks that the enrolling hello proves its key, counting a
// failure against tok.
func (p *Plane) enrolProof(now time.Time, e *Hello, tok *TokenRecord) (*enrolment, bool) {
	en, code, msg := p.proveKey(now, e)
	switch code {
	case "":
		en.tok = tok
		return en, true
	case ErrNonceMemoryFull:
		p.refuse(e.Req, code, msg) // the plane's limit, not the caller's failure
		return nil, false
	}
	p.tokenFailed(tok, now)
	if !tok.BurnedAt.IsZero() {
		msg += fmt.Sprintf("; join token %s is burned after %d failed attempts", tok.ID, tok.Failures)
	}
	p.rejectHello(now, e.Req, code, "%s", msg)
	return nil, false
}

// proveKey checks an enrolling hello's key and signature; the failure is
// a reject code and a message.
func (p *Plane) proveKey(now time.Time, e *Hello) (*enrolment, string, string) {
	a, h := &e.Auth, &e.Body
	if h.PublicKey == nil || *h.PublicKey == "" {
		return nil, wire.RejectEnrollSignatureRequired, "an enrolling hello carries public_key and is signed by that key; this one has no public_key"
	}
	if a.Sig == nil {
		return nil, wire.RejectEnrollSignatureRequired, "the enrolling hello is not signed: sign it with the key in public_key"
	}
	pub, err := identity.DecodePublicKey(*h.PublicKey)
	if err != nil {
		return nil, wire.RejectEnrollSignatureInvalid, err.Error()
	}
	id := identity.KeyID(pub)
	if a.Sig.KeyID != id {
		return nil, wire.RejectKeyIDMismatch, fmt.Sprintf("signed by key %s; public_key is key %s", a.Sig.KeyID, id)
	}
	if owner, ok := p.byKey[id]; ok && owner != p.byMachine[h.MachineID] {
		return nil, wire.RejectKeyIDMismatch, fmt.Sprintf("key %s is enrolled for worker %s already: each host has its own key", id, owner)
	}
	if _, gone := p.revoked[id]; gone {
		return nil, wire.RejectKeyIDMismatch, fmt.Sprintf("key %s was revoked: the host makes a new key to join again", id)
	}
	if code, msg := p.checkSigned(now, pub, a); code != "" {
		if code == ErrNonceMemoryFull {
			return nil, code, msg
		}
		return nil, wire.RejectEnrollSignatureInvalid, code + ": " + msg
	}
	return &enrolment{keyID: id, pub: pub, enc: *h.PublicKey}, "", ""
}

// enrol gives w the enrolled key and redeems the token, in one Step: the
// batch holds both, so a store has both or neither. Any key w had is
// forgotten (its host was reinstalled).
func (p *Plane) enrol(now time.Time, w *worker, en *enrolment) {
	p.dropKeys(w)
	r := &w.rec
	enc := en.enc
	r.PublicKey, r.KeyID = &enc, en.keyID
	r.PrevKeyID, r.PrevPublicKey, r.RotatedAt = "", "", time.Time{}
	r.KeyRevoked = false
	r.TokenID, r.PinnedQueue, r.PinnedTags = en.tok.ID, en.tok.Queue, append([]string(nil), en.tok.Tags...)
	w.pub, w.prevPub = en.pub, nil
	p.byKey[en.keyID] = w.ID()
	en.tok.RedeemedAt, en.tok.WorkerID = now, w.ID()
	p.putToken(en.tok)
}

// dropKeys forgets w's current and previous key ids in the index.
func (p *Plane) dropKeys(w *worker) {
	for _, id := range []string{w.rec.KeyID, w.rec.PrevKeyID} {
		if id != "" && p.byKey[id] == w.ID() {
			delete(p.byKey, id)
		}
	}
}

// restoreKeys decodes a restored worker's keys and indexes them. A record
// from before enrolment existed may carry a public_key its hello
// reported; without a key id it was never enrolled, and is dropped.
func (p *Plane) restoreKeys(w *worker) error {
	r := &w.rec
	for _, id := range r.RevokedKeyIDs {
		p.revoked[id] = r.ID
	}
	if r.KeyID == "" {
		r.PublicKey = nil
		return nil
	}
	var err error
	if r.PublicKey == nil {
		return fmt.Errorf("plane: restore: worker %s: key %s without a public key", r.ID, r.KeyID)
	}
	if w.pub, err = identity.DecodePublicKey(*r.PublicKey); err != nil {
		return fmt.Errorf("plane: restore: worker %s: %w", r.ID, err)
	}
	p.byKey[r.KeyID] = r.ID
	if r.PrevKeyID == "" {
		return nil
	}
	if w.prevPub, err = identity.DecodePublicKey(r.PrevPublicKey); err != nil {
		return fmt.Errorf("plane: restore: worker %s: previous key: %w", r.ID, err)
	}
	p.byKey[r.PrevKeyID] = r.ID
	return nil
}
