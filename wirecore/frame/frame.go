// Package frame is the relay's framing: a 4-byte big-endian length followed
// by that many payload bytes, and the request envelope carried inside.
//
// It decides the byte layout of a frame, the 256 MiB ceiling, how a stream
// of bytes arriving in arbitrary pieces becomes frames (Decoder), and how the
// head of a request envelope is read without holding its body
// (ReadEnvelope), so that a relay can stream a large body. It holds both
// halves of an exchange: the relay's (reading a request envelope, writing
// raw and id replies) and the daemon's (request ids, writing a request,
// reading its reply; request_reply.go), so the two agree by construction.
//
// It does not decide what a relay or a daemon does with a frame, how long it
// waits for bytes, or which endpoints are allowed: those belong to the relay
// and to the transports in hostio. It performs no I/O.
package frame

import (
	"encoding/binary"
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// HeaderSize is the length of a frame header.
const HeaderSize = 4

// MaxPayload is the largest payload a frame may announce. A larger length
// is refused before anything is allocated for it.
const MaxPayload = 256 << 20

// TooLargeError reports a header that announces more than MaxPayload bytes.
// Length is the announced length, so a reader can discard exactly that many
// bytes and stay in step with the stream.
type TooLargeError struct {
	Length uint64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("frame: payload of %d bytes exceeds the %d-byte ceiling", e.Length, MaxPayload)
}

// TruncatedError reports a stream that ended inside a frame. Have is the
// number of bytes of the frame (header included) that arrived, Want the
// number a complete frame needs; Want is HeaderSize when the header itself is
// incomplete.
type TruncatedError struct {
	Have, Want int
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("frame: truncated: stream ended after %d of %d bytes", e.Have, e.Want)
}

// ParseHeader returns the payload length a header announces, or a
// *TooLargeError when it exceeds MaxPayload.
func ParseHeader(h [HeaderSize]byte) (int, error) {
	n := binary.BigEndian.Uint32(h[:])
	if n > MaxPayload {
		return 0, &TooLargeError{Length: uint64(n)}
	}
	return int(n), nil
}

// AppendHeader appends the header of an n-byte payload to dst. It panics
// when n is negative or over MaxPayload: writing a frame no reader accepts
// is a bug in the caller, never a property of the input.
func AppendHeader(dst []byte, n int) []byte {
	checkLen(n)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// Append appends a whole frame (header and payload) to dst, so that it can
// go out in one write and is never interleaved with another writer's bytes.
// It allocates only when dst lacks capacity. It panics like AppendHeader.
func Append(dst, payload []byte) []byte {
	dst = AppendHeader(dst, len(payload))
	return append(dst, payload...)
}

// Begin appends a placeholder header to dst and returns the buffer and the
// header's position; append the payload, then call End. This encodes a
// message straight into the frame buffer with no intermediate copy.
func Begin(dst []byte) ([]byte, int) {
	return append(dst, 0, 0, 0, 0), len(dst)
}

// End fills in the header written by Begin at position at with the length
// of everything appended after it. It returns a *TooLargeError, leaving buf
// unchanged, when that payload exceeds MaxPayload.
func End(buf []byte, at int) error {
	n := len(buf) - at - HeaderSize
	if n > MaxPayload {
		return &TooLargeError{Length: uint64(n)}
	}
	binary.BigEndian.PutUint32(buf[at:], uint32(n))
	return nil
}

// AppendMsg appends m, msgpack-encoded, as one frame to dst.
func AppendMsg(dst []byte, m msgp.Marshaler) ([]byte, error) {
	buf, at := Begin(dst)
	buf, err := m.MarshalMsg(buf)
	if err != nil {
		return dst, fmt.Errorf("frame: encode: %w", err)
	}
	if err := End(buf, at); err != nil {
		return dst, err
	}
	return buf, nil
}

// Split takes one complete frame off the front of p without copying: the
// payload aliases p. It returns a *TruncatedError when p ends inside the
// frame and a *TooLargeError for an oversize header. It suits a frame that
// arrived whole, such as a spool file.
func Split(p []byte) (payload, rest []byte, err error) {
	if len(p) < HeaderSize {
		return nil, p, &TruncatedError{Have: len(p), Want: HeaderSize}
	}
	n, err := ParseHeader([HeaderSize]byte(p))
	if err != nil {
		return nil, p, err
	}
	end := HeaderSize + n
	if len(p) < end {
		return nil, p, &TruncatedError{Have: len(p), Want: end}
	}
	return p[HeaderSize:end:end], p[end:], nil
}

func checkLen(n int) {
	if n < 0 || n > MaxPayload {
		panic(fmt.Sprintf("frame: payload length %d outside [0, %d]", n, MaxPayload))
	}
}
