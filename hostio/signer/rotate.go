package signer

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Rotate replaces the key with next (docs/protocol.md, "Key rotation"):
// it posts /v1/daemon/keys for workerID, signed by the outgoing key, with
// next's signature over the same canonical string as proof that the host
// holds it. Once the control plane accepts, store keeps next (the key
// file) and next signs every request from then on. Requests signed by the
// outgoing key while this call is out are still accepted for the
// replay window after the switch, so a poll in flight across it is not
// lost. It returns the new key's id.
func (t *Transport) Rotate(ctx context.Context, workerID string, next ed25519.PrivateKey, store func(ed25519.PrivateKey) error) (string, error) {
	key, id := t.current()
	body, err := (&wire.KeyRotationRequest{WorkerID: workerID,
		NewPublicKey: identity.EncodePublicKey(next.Public().(ed25519.PublicKey)), OldKeyID: id}).MarshalMsg(nil)
	if err != nil {
		return "", fmt.Errorf("signer: encode key rotation: %w", err)
	}
	req, s, err := t.sign(&transport.Request{Endpoint: wire.PathKeys, Body: body, Lane: transport.LaneControl}, key, id)
	if err != nil {
		return "", err
	}
	proof := s
	identity.Sign(next, identity.NewRequest("POST", wire.PathKeys, body), &proof)
	req.Headers[identity.HeaderNewKeySignature] = identity.EncodeSignature(proof.Sig[:])
	resp, err := t.next.RoundTrip(ctx, req)
	if err != nil {
		return "", fmt.Errorf("signer: rotate key %s: %w", id, err)
	}
	t.checkRevoked(resp)
	if err := transport.Check(req, resp); err != nil {
		return "", fmt.Errorf("signer: rotate key %s: %w", id, err)
	}
	var out wire.KeyRotationResponse
	if _, err := out.UnmarshalMsg(resp.Body); err != nil {
		return "", fmt.Errorf("signer: rotate key %s: reply: %w", id, err)
	}
	if out.Reject != nil {
		return "", fmt.Errorf("signer: rotate key %s: refused: %s: %s", id, out.Reject.Code, out.Reject.Message)
	}
	want := identity.KeyID(next.Public().(ed25519.PublicKey))
	if string(out.KeyID) != want {
		return "", fmt.Errorf("signer: rotate key %s: the control plane enrolled key %q, not %q", id, out.KeyID, want)
	}
	if err := store(next); err != nil {
		// The plane has the new key: keep signing with it, or every later
		// request is refused once the window passes. The key file still
		// holds the old one; say so loudly.
		t.setKey(next)
		return want, fmt.Errorf("signer: key %s enrolled, but storing it failed (a restart will sign with the revoked-by-rotation old key): %w", want, err)
	}
	t.setKey(next)
	return want, nil
}
