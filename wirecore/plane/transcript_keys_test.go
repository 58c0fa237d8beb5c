package plane_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Signed requests in transcripts. A daemon case signs with sign=NAME,
// the Ed25519 key ed25519.NewKeyFromSeed(SHA-256("transcript key NAME")),
// so key A is the same key in every file; its key id shows as key-A. The
// signature covers the case's body as it marshals; the case may change
// what is signed:
//
//	skew=S      the timestamp is now+S seconds
//	aud=X       the audience (default transcriptAudience)
//	nonce=N     a fixed nonce (default: a fresh one per case)
//	keyid=B     claim key B's id while signing with NAME
//	tamper      sign another body than the one sent
//	bearer      also carry the daemon bearer (unsigned cases carry it
//	            unless nobearer)
//
// hello takes pub=NAME (public_key of key NAME, pub=junk for a string
// that is none) and token=T1 (the secret of token T1; token=unknown for a
// well-formed secret no one minted). mint ttl=D queue=Q tags=k=v mints
// token T<n>; keys worker=W new=NAME [old=NAME] [proof=NAME|none|junk]
// rotates; revoke worker=W revokes; restart require-signatures=on|off.

// transcriptAudience is Config.Audience in every transcript.
const transcriptAudience = "https://cp.example"

// transcriptOtherName is another name of the same control plane
// (Config.OtherAudiences).
const transcriptOtherName = "https://10.0.0.5:8383"

// authCodes are the refusals whose message a transcript shows.
var authCodes = map[string]bool{
	plane.ErrBearerRequired: true, plane.ErrSignatureRequired: true, plane.ErrEnrollmentSignatureRequired: true,
	plane.ErrUnknownKey: true, plane.ErrKeyRevoked: true, plane.ErrSignatureExpired: true, plane.ErrWrongAudience: true,
	plane.ErrSignatureInvalid: true, plane.ErrNonceReplayed: true, plane.ErrNonceMemoryFull: true, plane.ErrWorkerMismatch: true,
}

// transcriptKey is key name's private key, registering its id's alias.
func (h *harness) transcriptKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("transcript key " + name))
	priv := ed25519.NewKeyFromSeed(seed[:])
	id := identity.KeyID(priv.Public().(ed25519.PublicKey))
	h.alias[id], h.ids["key-"+name] = "key-"+name, id
	return priv
}

func (h *harness) keyID(name string) string {
	return identity.KeyID(h.transcriptKey(name).Public().(ed25519.PublicKey))
}

// publicKey is the wire public_key of key name ("" for none).
func (h *harness) publicKey(name string) string {
	switch name {
	case "":
		return ""
	case "junk":
		return "not-a-key"
	}
	return identity.EncodePublicKey(h.transcriptKey(name).Public().(ed25519.PublicKey))
}

// secret is the secret of token alias v ("" for none).
func (h *harness) secret(v string) string {
	switch v {
	case "":
		return ""
	case "unknown":
		return strings.Repeat("ab", identity.SecretBytes)
	}
	s, ok := h.secrets[v]
	if !ok {
		panic("no token " + v)
	}
	return s
}

func marshal(m msgp.Marshaler) []byte {
	b, err := m.MarshalMsg(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// auth is the Auth of a daemon case on path with body.
func (h *harness) auth(t *testing.T, d *datadriven.TestData, path string, body []byte) plane.Auth {
	a := plane.Auth{Req: identity.NewRequest("POST", path, body)}
	name := str(d, "sign")
	if name == "" {
		a.Bearer = !d.HasArg("nobearer")
		return a
	}
	a.Bearer = d.HasArg("bearer")
	h.nonces++
	sig := &identity.Signature{KeyID: h.keyID(name), Timestamp: h.now.Unix() + int64(float(t, d, "skew", 0)),
		Nonce: fmt.Sprintf("nonce-%010d", h.nonces), Audience: transcriptAudience}
	if v := str(d, "nonce"); v != "" {
		sig.Nonce = fmt.Sprintf("fixed-%010s", v)
	}
	if d.HasArg("aud") {
		sig.Audience = str(d, "aud")
	}
	if v := str(d, "keyid"); v != "" {
		sig.KeyID = h.keyID(v)
	}
	signed := a.Req
	if d.HasArg("tamper") {
		signed = identity.NewRequest("POST", path, append(body, 0xc0))
	}
	identity.Sign(h.transcriptKey(name), signed, sig)
	a.Sig = sig
	return a
}

// keys is a key rotation case: the outgoing key signs (sign=), the new
// key's proof is over the same canonical string.
func (h *harness) keys(t *testing.T, d *datadriven.TestData) plane.Event {
	body := wire.KeyRotationRequest{WorkerID: h.id(str(d, "worker")), NewPublicKey: h.publicKey(str(d, "new"))}
	if v := str(d, "old"); v != "" {
		body.OldKeyID = h.keyID(v)
	}
	a := h.auth(t, d, wire.PathKeys, marshal(&body))
	proof := str(d, "proof")
	if proof == "" {
		proof = str(d, "new")
	}
	switch {
	case proof == "none" || a.Sig == nil:
	case proof == "junk":
		a.NewKeySig = "junk"
	default:
		s := *a.Sig
		identity.Sign(h.transcriptKey(proof), a.Req, &s)
		a.NewKeySig = identity.EncodeSignature(s.Sig[:])
	}
	return plane.Keys{Req: req(t, d), Body: body, Auth: a}
}

// mint mints a token whose secret the harness draws from the token's
// number, and remembers it under the token's alias.
func (h *harness) mint(t *testing.T, d *datadriven.TestData) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "transcript secret %d", h.counts["T"]+1))
	secret := hex.EncodeToString(sum[:])
	var ttl time.Duration
	d.MaybeScanArgs(t, "ttl", &ttl)
	ev := plane.CreateToken{Req: req(t, d), SecretHash: identity.SecretHash(secret), TTL: ttl,
		Queue: str(d, "queue"), Tags: list(d, "tags")}
	if d.HasArg("badhash") {
		ev.SecretHash = "nothex"
	}
	out := h.step(t, d, ev)
	if a := fmt.Sprintf("T%d", h.counts["T"]); h.ids[a] != "" && h.secrets[a] == "" {
		h.secrets[a] = secret
	}
	return out
}

func (h *harness) showKeys(w *plane.WorkerRecord) string {
	var s string
	if w.KeyID != "" {
		s += " key=" + h.aliasText(w.KeyID)
	}
	if w.PrevKeyID != "" {
		s += fmt.Sprintf(" prev=%s@%s", h.aliasText(w.PrevKeyID), h.rel(w.RotatedAt))
	}
	if w.KeyRevoked {
		s += " key-revoked"
	}
	if len(w.RevokedKeyIDs) > 0 {
		s += " revoked=" + h.aliasText(strings.Join(w.RevokedKeyIDs, ","))
	}
	if w.TokenID != "" {
		s += " token=" + h.name("T", w.TokenID)
	}
	return s
}

func (h *harness) showToken(tk *plane.TokenRecord) string {
	s := fmt.Sprintf("persist token %s expires=%s", h.name("T", tk.ID), h.rel(tk.ExpiresAt))
	if tk.Failures > 0 {
		s += fmt.Sprintf(" failures=%d", tk.Failures)
	}
	if !tk.BurnedAt.IsZero() {
		s += " burned"
	}
	if !tk.RedeemedAt.IsZero() {
		s += " redeemed-by=" + h.name("W", tk.WorkerID)
	}
	return s
}
