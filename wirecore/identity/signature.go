package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The signature headers (docs/protocol.md, "Request signatures"). The X-LS-
// prefix is inherited from the protocol's first implementation; peers
// written to it expect these exact names.
const (
	HeaderKeyID     = "X-LS-Key-Id"
	HeaderTimestamp = "X-LS-Timestamp"
	HeaderNonce     = "X-LS-Nonce"
	HeaderAudience  = "X-LS-Audience"
	HeaderSignature = "X-LS-Signature"
	// HeaderEnrollToken carries a join token's secret half on the hello
	// that enrolls a key. It is never signed over by itself: the hello's
	// body and signature bind the key, the token admits it.
	HeaderEnrollToken = "X-LS-Enroll-Token"
	// HeaderNewKeySignature proves possession of the new key on
	// /v1/daemon/keys: the new key's signature over the same canonical
	// string the outgoing key signed.
	HeaderNewKeySignature = "X-LS-New-Key-Signature"
)

// SignedHeaders are the headers a signed request carries, in the order
// docs/protocol.md lists them.
var SignedHeaders = [...]string{HeaderKeyID, HeaderTimestamp, HeaderNonce, HeaderAudience, HeaderSignature}

// Window is how far a request's timestamp may be from the verifier's
// clock, either way. A nonce is remembered for as long as its timestamp
// is inside the window, so a replay is refused for as long as it could
// otherwise be accepted.
const Window = 60 * time.Second

// Limits of the signature headers, checked before anything is decoded.
const (
	MaxKeyIDBytes    = 64
	MinNonceBytes    = 16 // base64url characters: at least 96 random bits
	MaxNonceBytes    = 64
	MaxAudienceBytes = 256
	signatureChars   = 86 // base64url without padding of 64 bytes
	maxTimestampLen  = 19 // decimal int64 seconds
)

// canonicalPrefix names the canonical string's version; a change to what is
// signed changes it.
const canonicalPrefix = "nymph-request-v1"

// Signature is the parsed signature headers of one request.
type Signature struct {
	KeyID     string
	Timestamp int64 // epoch seconds
	Nonce     string
	Audience  string
	Sig       [ed25519.SignatureSize]byte
}

// Audience is the origin of a control plane's URL as a signature names
// it: scheme://host[:port], lowercased, without path. The daemon signs
// for the URL it reaches the plane at; the plane takes its public URL's,
// and its other names', the same way.
func Audience(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// Request is what a signature covers besides its own headers.
type Request struct {
	Method string // "POST"
	// Path is the request's path without query ("/v1/daemon/poll"); for a
	// log sink URL handed out by the server, that URL's path.
	Path       string
	BodySHA256 [sha256.Size]byte
}

// NewRequest is a Request over body.
func NewRequest(method, path string, body []byte) Request {
	return Request{Method: method, Path: path, BodySHA256: sha256.Sum256(body)}
}

// AppendCanonical appends the canonical string of req under s to dst: the
// lines version, method, path, hex SHA-256 of the body, timestamp,
// nonce, audience and key id, joined by "\n" with none after the last.
func AppendCanonical(dst []byte, req Request, s *Signature) []byte {
	dst = append(dst, canonicalPrefix...)
	dst = append(dst, '\n')
	dst = append(dst, req.Method...)
	dst = append(dst, '\n')
	dst = append(dst, req.Path...)
	dst = append(dst, '\n')
	dst = hex.AppendEncode(dst, req.BodySHA256[:])
	dst = append(dst, '\n')
	dst = strconv.AppendInt(dst, s.Timestamp, 10)
	dst = append(dst, '\n')
	dst = append(dst, s.Nonce...)
	dst = append(dst, '\n')
	dst = append(dst, s.Audience...)
	dst = append(dst, '\n')
	dst = append(dst, s.KeyID...)
	return dst
}

// Sign fills s.Sig with priv's signature of req under s's other fields.
func Sign(priv ed25519.PrivateKey, req Request, s *Signature) {
	var buf [512]byte
	msg := AppendCanonical(buf[:0], req, s)
	copy(s.Sig[:], ed25519.Sign(priv, msg))
}

// Verify reports whether s.Sig is pub's signature of req under s.
func Verify(pub ed25519.PublicKey, req Request, s *Signature) bool {
	if len(pub) != ed25519.PublicKeySize {
		return false
	}
	var buf [512]byte
	msg := AppendCanonical(buf[:0], req, s)
	return ed25519.Verify(pub, msg, s.Sig[:])
}

// Header returns the header values of s, keyed by name.
func (s *Signature) Header() map[string]string {
	return map[string]string{
		HeaderKeyID:     s.KeyID,
		HeaderTimestamp: strconv.FormatInt(s.Timestamp, 10),
		HeaderNonce:     s.Nonce,
		HeaderAudience:  s.Audience,
		HeaderSignature: EncodeSignature(s.Sig[:]),
	}
}

// EncodeSignature is sig in base64url without padding.
func EncodeSignature(sig []byte) string { return base64.RawURLEncoding.EncodeToString(sig) }

// DecodeSignature reads a base64url (no padding) Ed25519 signature.
func DecodeSignature(v string) ([ed25519.SignatureSize]byte, error) {
	var out [ed25519.SignatureSize]byte
	if len(v) != signatureChars {
		return out, fmt.Errorf("%d characters; a signature is %d", len(v), signatureChars)
	}
	if _, err := base64.RawURLEncoding.Decode(out[:], []byte(v)); err != nil {
		return out, errors.New("not base64url without padding")
	}
	return out, nil
}

// ErrNoSignature says a request carries none of the signature headers.
var ErrNoSignature = errors.New("identity: request is not signed")

// HeaderError names the signature header that is malformed.
type HeaderError struct {
	Header string
	Reason string
}

func (e *HeaderError) Error() string { return "identity: header " + e.Header + ": " + e.Reason }

// ParseSignature reads the signature headers through values (such as
// http.Header.Values, which takes canonical or any-case names). No header
// at all is ErrNoSignature; some but not all, a repeated one, or one past
// its limit is a *HeaderError naming it. Every value is bounded before it
// is decoded.
func ParseSignature(values func(name string) []string) (Signature, error) {
	var raw [len(SignedHeaders)]string
	present := 0
	for i, name := range SignedHeaders {
		vs := values(name)
		switch len(vs) {
		case 0:
			continue
		case 1:
			raw[i] = vs[0]
			present++
		default:
			return Signature{}, &HeaderError{name, fmt.Sprintf("given %d times; once at most", len(vs))}
		}
	}
	if present == 0 {
		return Signature{}, ErrNoSignature
	}
	for i, name := range SignedHeaders {
		if raw[i] == "" {
			return Signature{}, &HeaderError{name, "missing (a signed request carries all of " + signedHeaderList + ")"}
		}
	}
	var s Signature
	var err error
	if s.KeyID, err = parseKeyID(raw[0]); err != nil {
		return Signature{}, &HeaderError{HeaderKeyID, err.Error()}
	}
	if s.Timestamp, err = parseTimestamp(raw[1]); err != nil {
		return Signature{}, &HeaderError{HeaderTimestamp, err.Error()}
	}
	if s.Nonce, err = parseNonce(raw[2]); err != nil {
		return Signature{}, &HeaderError{HeaderNonce, err.Error()}
	}
	if s.Audience, err = parseAudience(raw[3]); err != nil {
		return Signature{}, &HeaderError{HeaderAudience, err.Error()}
	}
	if s.Sig, err = DecodeSignature(raw[4]); err != nil {
		return Signature{}, &HeaderError{HeaderSignature, err.Error()}
	}
	return s, nil
}

const signedHeaderList = HeaderKeyID + ", " + HeaderTimestamp + ", " + HeaderNonce + ", " + HeaderAudience + " and " + HeaderSignature

func parseKeyID(v string) (string, error) {
	if len(v) > MaxKeyIDBytes {
		return "", fmt.Errorf("%d bytes; at most %d", len(v), MaxKeyIDBytes)
	}
	if !ValidKeyID(v) {
		return "", errors.New("not a key id (" + keyIDPrefix + " and 32 lowercase hex digits)")
	}
	return v, nil
}

func parseTimestamp(v string) (int64, error) {
	if len(v) > maxTimestampLen {
		return 0, fmt.Errorf("%d characters; epoch seconds have at most %d", len(v), maxTimestampLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, errors.New("not whole epoch seconds in decimal digits")
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, errors.New("out of range")
	}
	return n, nil
}

func parseNonce(v string) (string, error) {
	if len(v) < MinNonceBytes || len(v) > MaxNonceBytes {
		return "", fmt.Errorf("%d characters; a nonce has %d to %d", len(v), MinNonceBytes, MaxNonceBytes)
	}
	for i := 0; i < len(v); i++ {
		if !isBase64URL(v[i]) {
			return "", errors.New("not base64url characters (A-Z a-z 0-9 - _)")
		}
	}
	return v, nil
}

func parseAudience(v string) (string, error) {
	if len(v) > MaxAudienceBytes {
		return "", fmt.Errorf("%d bytes; at most %d", len(v), MaxAudienceBytes)
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return "", errors.New("not printable ASCII without spaces")
		}
	}
	return v, nil
}

func isBase64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// NonceBytes is how many random bytes a signer puts in a nonce.
const NonceBytes = 16

// EncodeNonce is random bytes as a nonce (base64url without padding).
func EncodeNonce(random []byte) string { return base64.RawURLEncoding.EncodeToString(random) }

// Fresh reports whether timestamp ts (epoch seconds) is within Window of now.
func Fresh(ts int64, now time.Time) bool {
	d := now.Unix() - ts
	w := int64(Window / time.Second)
	return d <= w && d >= -w
}
