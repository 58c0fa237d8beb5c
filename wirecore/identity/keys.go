package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// keyIDPrefix begins every key id; the rest is the first 16 bytes of the
// SHA-256 of the raw public key, in lowercase hex.
const keyIDPrefix = "ed25519-"

const keyIDLen = len(keyIDPrefix) + 32

// KeyID is the id of public key pub: derived from the key, so a verifier
// needs no table to tell which key a request claims, and a key id names
// one key on every control plane.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return keyIDPrefix + hex.EncodeToString(sum[:16])
}

// ValidKeyID reports whether v has the shape of a KeyID.
func ValidKeyID(v string) bool {
	if len(v) != keyIDLen || !strings.HasPrefix(v, keyIDPrefix) {
		return false
	}
	for i := len(keyIDPrefix); i < len(v); i++ {
		c := v[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// EncodePublicKey is pub as the wire has it (hello public_key, keys
// new_public_key): base64url without padding of the 32 raw bytes.
func EncodePublicKey(pub ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(pub) }

// DecodePublicKey reads a wire public key.
func DecodePublicKey(v string) (ed25519.PublicKey, error) {
	if len(v) != base64.RawURLEncoding.EncodedLen(ed25519.PublicKeySize) {
		return nil, fmt.Errorf("identity: public key: %d characters; a raw Ed25519 key in base64url without padding has %d",
			len(v), base64.RawURLEncoding.EncodedLen(ed25519.PublicKeySize))
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, errors.New("identity: public key: not base64url without padding")
	}
	return ed25519.PublicKey(b), nil
}

// EncodeSeed is the identity file's content: the 32-byte private seed in
// base64url without padding, and a newline.
func EncodeSeed(priv ed25519.PrivateKey) []byte {
	return []byte(base64.RawURLEncoding.EncodeToString(priv.Seed()) + "\n")
}

// DecodeSeed reads an identity file's content (surrounding white space
// ignored) into the private key it seeds.
func DecodeSeed(b []byte) (ed25519.PrivateKey, error) {
	v := strings.TrimSpace(string(b))
	if len(v) != base64.RawURLEncoding.EncodedLen(ed25519.SeedSize) {
		return nil, fmt.Errorf("identity: key file: %d characters; a 32-byte seed in base64url without padding has %d",
			len(v), base64.RawURLEncoding.EncodedLen(ed25519.SeedSize))
	}
	seed, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, errors.New("identity: key file: not base64url without padding")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}
