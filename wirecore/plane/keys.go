package plane

import (
	"fmt"
	"slices"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Reject codes of a key rotation (KeyRotationResponse.reject), beside
// wire.RejectKeyIDMismatch for an old_key_id that is not the signer's.
const (
	RejectNewKeyInvalid           = "new_key_invalid"
	RejectNewKeySignatureRequired = "new_key_signature_required"
	RejectNewKeySignatureInvalid  = "new_key_signature_invalid"
	RejectNewKeyInUse             = "new_key_in_use"
)

// MaxRevokedKeys bounds the revoked key ids a worker record keeps: a key
// revoked longer ago than that many revocations reads as unknown_key.
const MaxRevokedKeys = 16

func (p *Plane) onKeys(now time.Time, e Keys) {
	if e.Auth.Sig == nil {
		p.refuse(e.Req, ErrSignatureRequired, "a key rotation is signed by the outgoing key")
		return
	}
	if v := wire.CheckID("worker_id", e.Body.WorkerID, wire.MaxWorkerIDBytes); v != nil {
		p.reply(e.Req, StatusUnprocessableEntity, *v)
		return
	}
	by, code, msg := p.verify(now, &e.Auth)
	if code != "" {
		p.refuse(e.Req, code, msg)
		return
	}
	if !p.actsFor(e.Req, by.w, e.Body.WorkerID, "key rotation") {
		return
	}
	newID, code, msg := p.checkRotation(&e, by)
	switch {
	case code == ErrUnknownKey:
		p.refuse(e.Req, code, msg)
	case code != "":
		p.reply(e.Req, StatusOK, wire.KeyRotationResponse{Reject: &wire.Reject{Code: code, Message: msg}})
	default:
		if !by.prev {
			p.rotate(now, by.w, newID, e.Body.NewPublicKey)
		}
		p.reply(e.Req, StatusOK, wire.KeyRotationResponse{KeyID: wire.Text(newID)})
	}
}

// checkRotation checks a rotation a worker's key signed: the new key,
// and its proof over the same canonical string. A repeat signed by the
// key it replaced (its answer was lost) succeeds again without change.
func (p *Plane) checkRotation(e *Keys, by signer) (string, string, string) {
	w, a := by.w, &e.Auth
	pub, err := identity.DecodePublicKey(e.Body.NewPublicKey)
	if err != nil {
		return "", RejectNewKeyInvalid, "new_public_key: " + err.Error()
	}
	newID := identity.KeyID(pub)
	if by.prev && newID != w.rec.KeyID {
		return "", ErrUnknownKey, fmt.Sprintf("key %s was replaced by %s at %s: a rotation is signed by the current key",
			a.Sig.KeyID, w.rec.KeyID, w.rec.RotatedAt.UTC().Format(time.RFC3339))
	}
	if e.Body.OldKeyID != "" && e.Body.OldKeyID != a.Sig.KeyID {
		return "", wire.RejectKeyIDMismatch, fmt.Sprintf("old_key_id is %s, but key %s signed", e.Body.OldKeyID, a.Sig.KeyID)
	}
	if !by.prev {
		if owner, ok := p.byKey[newID]; ok {
			return "", RejectNewKeyInUse, fmt.Sprintf("key %s is worker %s's already: rotate to a new key", newID, owner)
		}
		if _, gone := p.revoked[newID]; gone {
			return "", RejectNewKeyInUse, fmt.Sprintf("key %s was revoked: rotate to a new key", newID)
		}
	}
	if a.NewKeySig == "" {
		return "", RejectNewKeySignatureRequired, identity.HeaderNewKeySignature + " is missing: the new key signs the same canonical string as the outgoing key"
	}
	proof := *a.Sig
	if proof.Sig, err = identity.DecodeSignature(a.NewKeySig); err != nil {
		return "", RejectNewKeySignatureInvalid, identity.HeaderNewKeySignature + ": " + err.Error()
	}
	if !identity.Verify(pub, a.Req, &proof) {
		return "", RejectNewKeySignatureInvalid, fmt.Sprintf("%s does not verify under the new key %s", identity.HeaderNewKeySignature, newID)
	}
	return newID, "", ""
}

// rotate makes newID w's key; the outgoing one stays good for
// identity.Window, for requests signed before the daemon switched.
func (p *Plane) rotate(now time.Time, w *worker, newID, enc string) {
	r := &w.rec
	if r.PrevKeyID != "" && p.byKey[r.PrevKeyID] == w.ID() {
		delete(p.byKey, r.PrevKeyID)
	}
	pub, _ := identity.DecodePublicKey(enc) // checkRotation decoded it
	r.PrevKeyID, r.PrevPublicKey, r.RotatedAt = r.KeyID, *r.PublicKey, now
	r.KeyID, r.PublicKey = newID, &enc
	w.prevPub, w.pub = w.pub, pub
	p.byKey[newID] = w.ID()
	p.putWorker(w)
}

func (p *Plane) onRevokeKey(now time.Time, e RevokeKey) {
	w := p.target(e.Req, e.WorkerID)
	if w == nil {
		return
	}
	r := &w.rec
	if r.KeyID == "" {
		p.opError(e.Req, StatusConflict, "worker %s has no enrolled key to revoke", w.ID())
		return
	}
	ids := []string{r.KeyID}
	if r.PrevKeyID != "" {
		ids = append(ids, r.PrevKeyID)
	}
	p.dropKeys(w)
	for _, id := range ids {
		p.revoked[id] = w.ID()
	}
	r.RevokedKeyIDs = append(r.RevokedKeyIDs, ids...)
	if n := len(r.RevokedKeyIDs) - MaxRevokedKeys; n > 0 {
		for _, id := range r.RevokedKeyIDs[:n] {
			delete(p.revoked, id)
		}
		r.RevokedKeyIDs = slices.Delete(r.RevokedKeyIDs, 0, n)
	}
	r.KeyID, r.PublicKey, r.PrevKeyID, r.PrevPublicKey, r.RotatedAt = "", nil, "", "", time.Time{}
	r.KeyRevoked = true
	w.pub, w.prevPub = nil, nil
	p.putWorker(w)
	if w.hasPoll {
		// Its poll was let in by the key revoked now: it takes nothing more.
		req := w.poll
		p.unpark(req, now)
		p.refuse(req, ErrKeyRevoked, fmt.Sprintf("the key of worker %s was revoked; its host joins again with a new token (nymph ctl token)", w.ID()))
	}
	p.reply(e.Req, StatusOK, operator.KeyRevoked{WorkerID: w.ID(), KeyIDs: ids})
}
