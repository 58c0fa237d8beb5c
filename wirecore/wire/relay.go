package wire

import (
	"errors"
	"fmt"
	"math"

	"github.com/tinylib/msgp/msgp"
)

// Arrays and maps announced longer than this are refused before anything is
// allocated for them (a count is 4 bytes; its elements would be far more).
//msgp:limit arrays:65536 maps:65536

// RelayRequest is the payload of a relay request frame (docs/protocol.md,
// "Request envelope"). Endpoint and Body are the base shape; the other keys
// are nymph extensions that a relay which does not know them ignores.
type RelayRequest struct {
	Endpoint string `msg:"endpoint"`
	// Headers carries X-LS-* headers for the upstream request; a relay
	// forwards only those and never lets a frame set Authorization.
	Headers map[string]string `msg:"headers,omitempty,allownil"`
	// ContentType overrides application/x-msgpack (raw log chunks).
	ContentType string `msg:"content_type,omitempty"`
	// ID, when set, asks for a RelayReply envelope instead of raw bytes.
	ID string `msg:"id,omitempty"`
	// Body is the already-encoded request body, forwarded verbatim. It is
	// encoded last so that a relay can stream it without holding it.
	Body []byte `msg:"body,limit=268435456"`
}

// RelayReply answers a RelayRequest that carried an ID.
type RelayReply struct {
	ID string `msg:"id"`
	// Status is the upstream HTTP status; 0 for a transport failure, 400 for
	// a refused frame, 413 for an oversize one, 503 when cut off by shutdown.
	Status     Int              `msg:"status"`
	Body       []byte           `msg:"body,limit=268435456"`
	RelayError *RelayReplyError `msg:"relay_error,omitempty"`
}

// ErrRelayRefused is the error code a daemon's client gives a refusal the
// relay made itself (a status, a message, no upstream body): it becomes
// the reply's body, {error: ErrRelayRefused, message}, read like a
// control plane's refusal, so the relay's reason reaches the daemon's log
// rather than a bare status. It is never sent on the wire.
const ErrRelayRefused = "relay_refused"

// RelayReplyError says why the relay itself failed or refused a request.
type RelayReplyError struct {
	Message string `msg:"message"`
}

// RelayErrorReply is the raw reply of a relay when the upstream failed or a
// frame was refused and the request carried no usable ID.
type RelayErrorReply struct {
	RelayError RelayFailure `msg:"relay_error"`
}

// RelayFailure is the content of a raw relay_error: Status is 0 for a
// transport error, and Body carries the upstream's bytes when there were any.
type RelayFailure struct {
	Status  Int    `msg:"status"`
	Message string `msg:"message"`
	Body    []byte `msg:"body,limit=268435456"`
}

// AppendStreamedHead appends the encoding of m, whose body (its last key,
// encoded empty) will be n bytes long, up to where those bytes go: the
// head of a reply whose body a relay streams rather than holds. The head
// followed by the n body bytes is exactly m's encoding with that body.
// m must be a *RelayReply without RelayError, or a *RelayErrorReply.
func AppendStreamedHead(dst []byte, m msgp.Marshaler, n int) ([]byte, error) {
	switch v := m.(type) {
	case *RelayReply:
		if v.RelayError != nil || len(v.Body) != 0 {
			return dst, errors.New("wire: a streamed RelayReply has no relay_error and an empty body")
		}
	case *RelayErrorReply:
		if len(v.RelayError.Body) != 0 {
			return dst, errors.New("wire: a streamed RelayErrorReply has an empty body")
		}
	default:
		return dst, fmt.Errorf("wire: %T has no streamed form", m)
	}
	if n < 0 || int64(n) > math.MaxUint32 {
		return dst, fmt.Errorf("wire: streamed body of %d bytes", n)
	}
	out, err := m.MarshalMsg(dst)
	if err != nil {
		return dst, err
	}
	// The empty body is the encoding's last two bytes: bin8 of length 0.
	if len(out) < len(dst)+2 || out[len(out)-2] != 0xc4 || out[len(out)-1] != 0 {
		return dst, fmt.Errorf("wire: %T does not end in its body", m)
	}
	return msgp.AppendBytesHeader(out[:len(out)-2], uint32(n)), nil
}
