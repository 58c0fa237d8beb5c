//go:build unix

package relay

import (
	"encoding/binary"
	"fmt"

	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// appendFrame appends the reply as one frame to dst. A request with an id gets
// a wire.RelayReply; one without gets the upstream's raw bytes on a 2xx and a
// wire.RelayErrorReply otherwise, as docs/protocol.md ("Raw reply", "Id reply")
// pins for daemons that predate ids. A streamed reply gets only its head: the
// frame header and the payload up to the body, whose bytes follow from
// r.stream.
func (r *reply) appendFrame(dst []byte) ([]byte, error) {
	if r.stream != nil {
		return r.appendHead(dst)
	}
	if m := r.envelope(); m != nil {
		return frame.AppendMsg(dst, m)
	}
	if len(r.body) > frame.MaxPayload {
		return dst, &frame.TooLargeError{Length: uint64(len(r.body))}
	}
	return frame.Append(dst, r.body), nil
}

// envelope is the message the reply's payload is, nil for a raw reply's
// bare upstream body. Its body is r.body (empty for a streamed reply).
func (r *reply) envelope() msgp.Marshaler {
	if r.id != "" {
		rr := &wire.RelayReply{ID: r.id, Status: wire.Int(r.status), Body: r.body}
		if r.relayErr {
			rr.RelayError = &wire.RelayReplyError{Message: r.message}
		}
		return rr
	}
	if !r.relayErr && r.status >= 200 && r.status <= 299 {
		return nil
	}
	msg := r.message
	if msg == "" {
		msg = fmt.Sprintf("upstream answered %d", r.status)
	}
	return &wire.RelayErrorReply{RelayError: wire.RelayFailure{
		Status: wire.Int(r.status), Message: msg, Body: r.body,
	}}
}

// appendHead appends a streamed reply's frame header and its payload up
// to the body.
func (r *reply) appendHead(dst []byte) ([]byte, error) {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	if m := r.envelope(); m != nil {
		var err error
		if dst, err = wire.AppendStreamedHead(dst, m, int(r.length)); err != nil {
			return dst[:at], err
		}
	}
	n := int64(len(dst)-at-frame.HeaderSize) + r.length
	if n > frame.MaxPayload {
		return dst[:at], &frame.TooLargeError{Length: uint64(n)}
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	return dst, nil
}

// payloadLen is the length of the reply frame's payload.
func (r *reply) payloadLen() int64 {
	if r.stream == nil {
		return 0 // held whole: appendFrame checks it
	}
	var head [256]byte
	out, err := r.appendHead(head[:0])
	if err != nil {
		return frame.MaxPayload + 1
	}
	return int64(len(out)-frame.HeaderSize) + r.length
}
