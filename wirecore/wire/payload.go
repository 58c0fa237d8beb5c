package wire

import (
	"errors"
	"fmt"
	"time"

	"github.com/tinylib/msgp/msgp"
)

// Payload limits of protocol "1".
const (
	PayloadInlineThreshold = 256 << 10
	PayloadMax             = 100 << 20
	// PayloadFetchTimeout bounds a payload's presign and download together.
	PayloadFetchTimeout = 60 * time.Second
)

// EnvPayload names, in an exec's environment, the file that holds its
// payload (payload_inline or payload_ref): a file of its own, read-only by
// its mode (which does not bind root: a root command that writes to it
// changes only its own copy), gone when the exec ends. A run gets its
// payload as args.msgpack instead.
const EnvPayload = "NYMPH_PAYLOAD"

// ErrPayloadInvalid marks a payload the daemon refuses before fetching it.
var ErrPayloadInvalid = errors.New("invalid payload")

// Check reports whether the ref can be resolved: a bucket (the presign's
// namespace) and a key, a size in 0..PayloadMax, and a sha256, when given,
// of 64 hex digits. It is checked before any request is made.
func (p *PayloadRef) Check() error {
	switch {
	case p.Bucket == "":
		return fmt.Errorf("%w: payload_ref has no bucket", ErrPayloadInvalid)
	case p.Key == "":
		return fmt.Errorf("%w: payload_ref has no key", ErrPayloadInvalid)
	case p.Size < 0 || p.Size > PayloadMax:
		return fmt.Errorf("%w: payload_ref size %d: want 0..%d", ErrPayloadInvalid, p.Size, PayloadMax)
	case p.SHA256 != nil && !ValidSHA256(*p.SHA256):
		return fmt.Errorf("%w: payload_ref sha256 %q: want 64 hex digits", ErrPayloadInvalid, *p.SHA256)
	}
	return nil
}

// CheckExecPayload reports whether an exec's payload fields agree: at most
// one of them, and an inline one of at most PayloadInlineThreshold bytes.
func CheckExecPayload(inline []byte, ref *PayloadRef) error {
	switch {
	case len(inline) > 0 && ref != nil:
		return fmt.Errorf("%w: both payload_inline and payload_ref", ErrPayloadInvalid)
	case len(inline) > PayloadInlineThreshold:
		return fmt.Errorf("%w: payload_inline of %d bytes: over %d, send a payload_ref", ErrPayloadInvalid, len(inline), PayloadInlineThreshold)
	case ref != nil:
		return ref.Check()
	}
	return nil
}

// PayloadRef points at a large payload in the control plane's payload store.
// Its codec is hand-written because decoding must accept both
// "content_type" and "contentType"; it encodes "content_type".
type PayloadRef struct {
	Bucket      string  `json:"bucket"`
	Key         string  `json:"key"`
	Size        Int     `json:"size"`
	ContentType string  `json:"content_type"`
	SHA256      *string `json:"sha256,omitempty"`
}

// MarshalMsg implements msgp.Marshaler.
func (p *PayloadRef) MarshalMsg(b []byte) ([]byte, error) {
	n := uint32(4)
	if p.SHA256 != nil {
		n++
	}
	b = msgp.AppendMapHeader(b, n)
	b = msgp.AppendString(msgp.AppendString(b, "bucket"), p.Bucket)
	b = msgp.AppendString(msgp.AppendString(b, "key"), p.Key)
	b = msgp.AppendInt64(msgp.AppendString(b, "size"), int64(p.Size))
	b = msgp.AppendString(msgp.AppendString(b, "content_type"), p.ContentType)
	if p.SHA256 != nil {
		b = msgp.AppendString(msgp.AppendString(b, "sha256"), *p.SHA256)
	}
	return b, nil
}

// Msgsize implements msgp.Sizer.
func (p *PayloadRef) Msgsize() int {
	n := msgp.MapHeaderSize + 5*(msgp.StringPrefixSize+12) + msgp.Int64Size +
		3*msgp.StringPrefixSize + len(p.Bucket) + len(p.Key) + len(p.ContentType)
	if p.SHA256 != nil {
		n += msgp.StringPrefixSize + len(*p.SHA256)
	}
	return n
}

// EncodeMsg implements msgp.Encodable.
func (p *PayloadRef) EncodeMsg(w *msgp.Writer) error {
	b, err := p.MarshalMsg(nil)
	if err != nil {
		return err
	}
	return w.Append(b...)
}

// UnmarshalMsg implements msgp.Unmarshaler. Unknown keys are skipped.
func (p *PayloadRef) UnmarshalMsg(b []byte) ([]byte, error) {
	n, rest, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return b, msgp.WrapError(err, "PayloadRef")
	}
	*p = PayloadRef{}
	for ; n > 0; n-- {
		var key []byte
		key, rest, err = msgp.ReadMapKeyZC(rest)
		if err != nil {
			return b, msgp.WrapError(err, "PayloadRef")
		}
		switch string(key) {
		case "bucket":
			p.Bucket, rest, err = msgp.ReadStringBytes(rest)
		case "key":
			p.Key, rest, err = msgp.ReadStringBytes(rest)
		case "size":
			rest, err = p.Size.UnmarshalMsg(rest)
		case "content_type", "contentType":
			if msgp.IsNil(rest) {
				rest, err = msgp.ReadNilBytes(rest)
			} else {
				p.ContentType, rest, err = msgp.ReadStringBytes(rest)
			}
		case "sha256":
			if msgp.IsNil(rest) {
				p.SHA256 = nil
				rest, err = msgp.ReadNilBytes(rest)
			} else {
				var s string
				s, rest, err = msgp.ReadStringBytes(rest)
				p.SHA256 = &s
			}
		default:
			rest, err = msgp.Skip(rest)
		}
		if err != nil {
			return b, msgp.WrapError(err, "PayloadRef", string(key))
		}
	}
	return rest, nil
}

// DecodeMsg implements msgp.Decodable.
func (p *PayloadRef) DecodeMsg(r *msgp.Reader) error {
	var raw msgp.Raw
	if err := raw.DecodeMsg(r); err != nil {
		return err
	}
	_, err := p.UnmarshalMsg(raw)
	return err
}
