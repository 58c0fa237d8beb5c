package frame

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// Envelope is what a relay needs from a request payload before it forwards
// the body: the msgpack map {endpoint, body, headers?, content_type?, id?}
// of wire.RelayRequest, with the body located rather than copied.
type Envelope struct {
	Endpoint    string
	Headers     map[string]string // nil when absent
	ContentType string            // empty when absent
	ID          string            // empty when absent: the relay answers raw
	// BodyOffset is where the body's bytes start within the payload and
	// BodyLen how many there are, so they can be streamed from the source.
	BodyOffset, BodyLen int
}

// ShortError means the prefix handed to ReadEnvelope ends before the
// envelope's head does. Read until at least Need bytes of the payload are
// held and call ReadEnvelope again. Need never exceeds the payload's size:
// an envelope that would need more is malformed instead.
//
// When keys follow the body (our encoder and the spec's both put body last,
// but msgpack maps are unordered), Need covers the whole body. A relay
// streaming large bodies can therefore cap what it is willing to hold and
// refuse such a frame when Need is over that cap.
type ShortError struct {
	Need int
}

func (e *ShortError) Error() string {
	return fmt.Sprintf("frame: envelope needs the first %d bytes of the payload", e.Need)
}

// EnvelopeError reports a payload that is not a valid request envelope.
type EnvelopeError struct {
	Key    string // the offending key, empty when the fault is not in one
	Reason string
}

func (e *EnvelopeError) Error() string {
	if e.Key == "" {
		return "frame: envelope: " + e.Reason
	}
	return fmt.Sprintf("frame: envelope: key %q: %s", e.Key, e.Reason)
}

// Bits of the keys already seen, to refuse duplicates: a second body or
// endpoint would make the streamed request ambiguous.
const (
	seenEndpoint = 1 << iota
	seenBody
	seenHeaders
	seenContentType
	seenID
)

// headersHint caps the map size hint, so a header count announced by a
// hostile frame does not allocate before the entries are there.
const headersHint = 16

// ReadEnvelope reads a request envelope from p, the first bytes of a
// payload of size bytes (len(p) may be less than size; bytes of p beyond
// size are ignored). It needs the body's bytes only when keys follow the
// body.
//
// It returns a *ShortError when p is too short to decide, and an
// *EnvelopeError for a payload that is not a map with string keys, lacks a
// non-empty endpoint or a body, has a known key of the wrong type (endpoint,
// content_type and id are str, headers a map of str to str, body bin or
// str; nil stands for an absent optional key), repeats a known key, or has
// bytes after the map. Unknown keys are skipped. On error the returned
// Envelope holds the keys read so far, so a refusal can still be addressed
// to ID.
//
// Keys after the body: our encoder (wire.RelayRequest) and the spec's
// daemons write body last, so the head alone is enough. When keys follow
// the body, their bytes can only be reached past it, so the *ShortError
// asks for the whole body and one byte more; a streaming relay holds that
// and retries when it is small, and refuses the frame when Need is over
// what it is willing to hold. Success always means every key was seen.
func ReadEnvelope(p []byte, size int) (Envelope, error) {
	if len(p) > size {
		p = p[:size]
	}
	r := envReader{p: p, size: size}
	err := r.read()
	return r.env, err
}

type envReader struct {
	p    []byte
	size int
	env  Envelope
	seen int
}

// short turns msgp's "not enough bytes" into a *ShortError asking for one
// more byte than held, or into a malformed envelope when the payload has no
// more bytes to give.
func (r *envReader) short(need int) error {
	if need > r.size {
		return &EnvelopeError{Reason: "truncated"}
	}
	return &ShortError{Need: need}
}

func (r *envReader) fail(key string, err error, reason string) error {
	if errors.Is(err, msgp.ErrShortBytes) {
		return r.short(len(r.p) + 1)
	}
	return &EnvelopeError{Key: key, Reason: reason}
}

func (r *envReader) read() error {
	n, rest, err := msgp.ReadMapHeaderBytes(r.p)
	if err != nil {
		return r.fail("", err, "not a map")
	}
	for i := uint32(0); i < n; i++ {
		key, after, err := msgp.ReadStringZC(rest)
		if err != nil {
			return r.fail("", err, "key is not a string")
		}
		if rest, err = r.value(key, after, i == n-1); err != nil {
			return err
		}
		if rest == nil {
			return nil // the body closed the map and was left for streaming
		}
	}
	return r.finish(len(r.p) - len(rest))
}

// value reads the value of key from b and returns the bytes after it, or
// nil when key is the body, it is the last key, and the envelope is done.
func (r *envReader) value(rawKey, b []byte, last bool) ([]byte, error) {
	bit := keyBit(rawKey)
	key := keyName(bit) // a constant: no allocation per key
	if bit != 0 && r.seen&bit != 0 {
		return nil, &EnvelopeError{Key: key, Reason: "repeated"}
	}
	r.seen |= bit
	switch bit {
	case seenEndpoint:
		v, rest, err := msgp.ReadStringZC(b)
		if err != nil {
			return nil, r.fail(key, err, "not a string")
		}
		r.env.Endpoint = string(v)
		return rest, nil
	case seenContentType, seenID:
		v, rest, err := r.optString(key, b)
		if bit == seenID {
			r.env.ID = v
		} else {
			r.env.ContentType = v
		}
		return rest, err
	case seenHeaders:
		return r.headers(key, b)
	case seenBody:
		return r.body(key, b, last)
	default:
		rest, err := msgp.Skip(b)
		if errors.Is(err, msgp.ErrShortBytes) {
			// A long str or bin announces its length: ask for all of it at
			// once rather than byte by byte.
			if hdr, n, herr := binHeader(b); herr == nil {
				return nil, r.short(max(len(r.p)-len(b)+hdr+n, len(r.p)+1))
			}
		}
		if err != nil {
			return nil, r.fail(string(rawKey), err, "malformed value")
		}
		return rest, nil
	}
}

func keyName(bit int) string {
	switch bit {
	case seenEndpoint:
		return "endpoint"
	case seenBody:
		return "body"
	case seenHeaders:
		return "headers"
	case seenContentType:
		return "content_type"
	case seenID:
		return "id"
	}
	return ""
}

func keyBit(key []byte) int {
	switch string(key) {
	case "endpoint":
		return seenEndpoint
	case "body":
		return seenBody
	case "headers":
		return seenHeaders
	case "content_type":
		return seenContentType
	case "id":
		return seenID
	}
	return 0
}

func (r *envReader) optString(key string, b []byte) (string, []byte, error) {
	if msgp.IsNil(b) {
		return "", b[1:], nil
	}
	v, rest, err := msgp.ReadStringZC(b)
	if err != nil {
		return "", nil, r.fail(key, err, "not a string")
	}
	return string(v), rest, nil
}

func (r *envReader) headers(key string, b []byte) ([]byte, error) {
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	n, rest, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, r.fail(key, err, "not a map")
	}
	r.env.Headers = make(map[string]string, min(n, headersHint))
	for ; n > 0; n-- {
		k, after, err := msgp.ReadStringZC(rest)
		if err != nil {
			return nil, r.fail(key, err, "header name is not a string")
		}
		v, after, err := msgp.ReadStringZC(after)
		if err != nil {
			return nil, r.fail(key, err, "header value is not a string")
		}
		r.env.Headers[string(k)] = string(v)
		rest = after
	}
	return rest, nil
}

// body locates the body from its bin (or str) header alone. When it is the
// last key the envelope is complete without its bytes; otherwise the bytes
// must be held to reach the keys after it.
func (r *envReader) body(key string, b []byte, last bool) ([]byte, error) {
	hdr, n, err := binHeader(b)
	if err != nil {
		return nil, r.fail(key, err, "not bin or str")
	}
	off := len(r.p) - len(b) + hdr
	if n > r.size-off {
		return nil, &EnvelopeError{Key: key, Reason: "runs past the end of the payload"}
	}
	r.env.BodyOffset, r.env.BodyLen = off, n
	end := off + n
	if last {
		return nil, r.finish(end)
	}
	if len(r.p) <= end {
		return nil, r.short(end + 1)
	}
	return r.p[end:], nil
}

// finish checks the map ended exactly where the payload does: trailing
// bytes would be streamed to nobody and hint at a confused writer.
func (r *envReader) finish(end int) error {
	switch {
	case r.seen&seenEndpoint == 0 || r.env.Endpoint == "":
		return &EnvelopeError{Key: "endpoint", Reason: "missing or empty"}
	case r.seen&seenBody == 0:
		return &EnvelopeError{Key: "body", Reason: "missing"}
	case end != r.size:
		return &EnvelopeError{Reason: fmt.Sprintf("%d bytes after the map", r.size-end)}
	}
	return nil
}

// binHeader returns the size of a bin or str header at the start of b and
// the length of the bytes it announces.
func binHeader(b []byte) (hdr, n int, err error) {
	if len(b) == 0 {
		return 0, 0, msgp.ErrShortBytes
	}
	lead := b[0]
	switch {
	case lead >= 0xa0 && lead <= 0xbf: // fixstr
		return 1, int(lead & 0x1f), nil
	case lead == 0xc4 || lead == 0xd9: // bin8, str8
		hdr = 2
	case lead == 0xc5 || lead == 0xda: // bin16, str16
		hdr = 3
	case lead == 0xc6 || lead == 0xdb: // bin32, str32
		hdr = 5
	default:
		return 0, 0, errors.New("wrong type")
	}
	if len(b) < hdr {
		return 0, 0, msgp.ErrShortBytes
	}
	switch hdr {
	case 2:
		n = int(b[1])
	case 3:
		n = int(binary.BigEndian.Uint16(b[1:]))
	default:
		n = int(binary.BigEndian.Uint32(b[1:]))
	}
	return hdr, n, nil
}

// MaxID is the longest request id an envelope may carry: ids name spool
// files, so they stay well below NAME_MAX.
const MaxID = 200

// ValidID reports whether id may name a request (docs/protocol.md,
// "Request envelope"): [A-Za-z0-9][A-Za-z0-9._-]* without "..", at most
// MaxID bytes. The id is echoed in replies and names spool files, so it
// must never be a path.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxID || !alnum(id[0]) {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !alnum(c) && c != '.' && c != '_' && c != '-' || c == '.' && i > 0 && id[i-1] == '.' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
