package relay

import (
	"fmt"

	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// appendFrame appends the reply as one frame to dst. A request with an id
// gets a wire.RelayReply; one without gets the upstream's raw bytes on a
// 2xx and a wire.RelayErrorReply otherwise, as spec 000 pins for daemons
// that predate ids.
func (r *reply) appendFrame(dst []byte) ([]byte, error) {
	if r.id != "" {
		rr := wire.RelayReply{ID: r.id, Status: wire.Int(r.status), Body: r.body}
		if r.relayErr {
			rr.RelayError = &wire.RelayReplyError{Message: r.message}
		}
		return frame.AppendMsg(dst, &rr)
	}
	if !r.relayErr && r.status >= 200 && r.status <= 299 {
		if len(r.body) > frame.MaxPayload {
			return dst, &frame.TooLargeError{Length: uint64(len(r.body))}
		}
		return frame.Append(dst, r.body), nil
	}
	msg := r.message
	if msg == "" {
		msg = fmt.Sprintf("upstream answered %d", r.status)
	}
	return frame.AppendMsg(dst, &wire.RelayErrorReply{RelayError: wire.RelayFailure{
		Status: wire.Int(r.status), Message: msg, Body: r.body,
	}})
}
