package identity

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// A join token is "<secret>.<fingerprint>": nymph's secret is SecretBytes
// random bytes in lowercase hex, the fingerprint the SHA-256 of the
// control plane's CA SubjectPublicKeyInfo in lowercase hex. The secret
// never holds a dot, so the last dot separates the halves. The operator
// copies one string; the host checks the CA against the fingerprint
// before the secret leaves it, and the control plane keeps only
// SecretHash(secret). A host takes any secret of MinSecretChars to
// MaxSecretChars base64url characters as it is (another control plane's
// `dle_…` tokens among them): the plane that minted it judges it.
const (
	SecretBytes    = 32
	MinSecretChars = 16
	MaxSecretChars = 128
	fingerprintLen = 2 * sha256.Size
	// MaxJoinTokenBytes bounds a token before it is parsed.
	MaxJoinTokenBytes = MaxSecretChars + 1 + fingerprintLen
)

// JoinToken is a parsed join token.
type JoinToken struct {
	Secret      string // as minted: 64 lowercase hex characters from nymph
	Fingerprint string // 64 lowercase hex characters
}

// String is the token as the operator copies it.
func (t JoinToken) String() string { return t.Secret + "." + t.Fingerprint }

// ParseJoinToken reads "<secret>.<fingerprint>". The secret is kept as
// given; an upper-case fingerprint is lowered. Anything else is an error
// that says which half is wrong.
func ParseJoinToken(s string) (JoinToken, error) {
	s = strings.TrimSpace(s)
	if len(s) > MaxJoinTokenBytes+8 {
		return JoinToken{}, fmt.Errorf("identity: join token: %d bytes; a token has %d", len(s), MaxJoinTokenBytes)
	}
	dot := strings.LastIndexByte(s, '.')
	if dot < 0 {
		return JoinToken{}, errors.New("identity: join token: no dot; a token is <secret>.<CA fingerprint>, as nymph ctl token prints it")
	}
	secret, fp := s[:dot], strings.ToLower(s[dot+1:])
	if err := ValidSecret(secret); err != nil {
		return JoinToken{}, fmt.Errorf("identity: join token: secret: %w", err)
	}
	if !isHex(fp, fingerprintLen) {
		return JoinToken{}, fmt.Errorf("identity: join token: CA fingerprint: want %d hex digits, got %d characters", fingerprintLen, len(fp))
	}
	return JoinToken{Secret: secret, Fingerprint: fp}, nil
}

// ValidSecret checks the shape of a token's secret half: MinSecretChars
// to MaxSecretChars base64url characters (A-Z a-z 0-9 - _).
func ValidSecret(secret string) error {
	if len(secret) < MinSecretChars || len(secret) > MaxSecretChars {
		return fmt.Errorf("%d characters; a secret has %d to %d", len(secret), MinSecretChars, MaxSecretChars)
	}
	for i := 0; i < len(secret); i++ {
		if !isBase64URL(secret[i]) {
			return errors.New("not base64url characters (A-Z a-z 0-9 - _)")
		}
	}
	return nil
}

// NewSecret is the secret half of a token from SecretBytes random bytes.
func NewSecret(random []byte) (string, error) {
	if len(random) != SecretBytes {
		return "", fmt.Errorf("identity: a secret takes %d random bytes, got %d", SecretBytes, len(random))
	}
	return hex.EncodeToString(random), nil
}

// SecretHash is what a control plane stores of a secret: its SHA-256 in
// lowercase hex.
func SecretHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// SPKIFingerprint is the fingerprint a join token pins: the SHA-256 of a
// certificate's DER SubjectPublicKeyInfo (x509.Certificate.
// RawSubjectPublicKeyInfo), in lowercase hex.
func SPKIFingerprint(spkiDER []byte) string {
	sum := sha256.Sum256(spkiDER)
	return hex.EncodeToString(sum[:])
}

// SameFingerprint compares two fingerprints in constant time, ignoring case.
func SameFingerprint(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(strings.ToLower(a)), []byte(strings.ToLower(b))) == 1
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
