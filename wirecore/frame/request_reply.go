package frame

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/nymphd/nymph/wirecore/ulid"
	"github.com/nymphd/nymph/wirecore/wire"
)

// This file is the daemon's half of a relay exchange, shared by the FIFO
// and spool transports, which carry the same frames: the request ids, the
// request envelope a daemon writes (wire.RelayRequest) and the reply it
// reads back (wire.RelayReply, or a raw reply). ReadEnvelope is the
// relay's half.

// IDs hands out request ids: a boot id (a ULID: 48-bit milliseconds and 80
// random bits in Crockford base32) and a counter, "01JD…-17". The boot part
// keeps ids unique across restarts of the daemon, so a reply to a request
// of a previous run is never taken for a reply to this one.
type IDs struct {
	boot string
	next atomic.Uint64
}

// NewIDs starts a sequence whose boot id is made from now and 80 bits read
// from entropy (crypto/rand.Reader for a daemon; tests may pass a fixed
// reader). Bytes a failing reader does not give are zero: the counter
// still keeps one run's ids apart.
func NewIDs(now time.Time, entropy io.Reader) *IDs {
	var e [10]byte
	_, _ = io.ReadFull(entropy, e[:])
	return &IDs{boot: ulid.String(now, e)}
}

// Next returns a fresh id; safe for concurrent use.
func (s *IDs) Next() string {
	return s.boot + "-" + strconv.FormatUint(s.next.Add(1), 10)
}

// EndpointPath returns what goes in the envelope's endpoint: the path
// itself, or the path of a full URL (a log sink handed out by the server).
// A URL with a query or fragment is refused: the relay forwards paths only,
// and dropping the rest silently would send the request somewhere else.
func EndpointPath(endpoint string) (string, error) {
	if strings.HasPrefix(endpoint, "/") && !strings.ContainsAny(endpoint, "?#") {
		return endpoint, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("endpoint %q: a relay carries no query or fragment", endpoint)
	}
	if u.Path == "" || u.Path[0] != '/' {
		return "", fmt.Errorf("endpoint %q: no absolute path", endpoint)
	}
	return u.EscapedPath(), nil
}

// AppendRequest appends req as one relay request frame to dst. Its
// Endpoint may be a full URL (EndpointPath); an empty ID asks for a raw
// reply, for a relay that predates ids. A nil Body is sent as an empty
// one: an absent body and an empty one are the same request.
func AppendRequest(dst []byte, req wire.RelayRequest) ([]byte, error) {
	ep, err := EndpointPath(req.Endpoint)
	if err != nil {
		return dst, err
	}
	req.Endpoint = ep
	if req.Body == nil {
		req.Body = []byte{}
	}
	return AppendMsg(dst, &req)
}

// Reply is the control plane's answer as a relay hands it back: the
// upstream's status and body (empty, never nil, when it sent none).
type Reply struct {
	Status int
	Body   []byte
}

// RelayError is a reply saying the relay could not reach the control plane
// (status 0): no response exists, so the core treats it as a transport
// failure and backs off.
type RelayError struct {
	Message string
}

func (e *RelayError) Error() string { return "relay: upstream unreachable: " + e.Message }

// ParseReply reads an id-mode reply payload. mine is false when the reply
// answers another request (a stale one from a timed-out request or a
// previous run) or is not an id reply at all; the caller discards it.
func ParseReply(payload []byte, id string) (reply Reply, mine bool, err error) {
	var r wire.RelayReply
	rest, err := r.UnmarshalMsg(payload)
	if err != nil || len(rest) != 0 || r.ID == "" || r.ID != id {
		return Reply{}, false, nil
	}
	if r.RelayError != nil {
		reply, err = relayFailure(int(r.Status), r.RelayError.Message, r.Body)
		return reply, true, err
	}
	return Reply{Status: int(r.Status), Body: nonNil(r.Body)}, true, nil
}

// relayFailure is what a reply carrying a relay_error, id or raw, stands
// for: with status 0 no response at all (a RelayError); with no body a
// refusal the relay made itself; else the upstream's answer, kept as it
// came.
func relayFailure(status int, message string, body []byte) (Reply, error) {
	switch {
	case status == 0:
		return Reply{}, &RelayError{Message: message}
	case len(body) == 0:
		return refusal(status, message), nil
	}
	return Reply{Status: status, Body: body}, nil
}

// refusal is a status the relay answered itself, with no upstream body:
// its message becomes a body of the shape a control plane refuses with
// (wire.ErrRelayRefused), which the daemon reads and logs.
func refusal(status int, message string) Reply {
	// A map of strings: encoding it cannot fail.
	body, _ := (&wire.ValidationError{Error: wire.ErrRelayRefused, Message: message}).MarshalMsg(nil)
	return Reply{Status: status, Body: body}
}

// ParseRawReply reads a reply of a relay answering raw (no ids): the
// payload is the upstream's body with status 200, unless it is exactly a
// {relay_error: {status, message, body}} map.
func ParseRawReply(payload []byte) (Reply, error) {
	if f, ok := RawRelayError(payload); ok {
		return relayFailure(int(f.Status), f.Message, f.Body)
	}
	return Reply{Status: 200, Body: append([]byte{}, payload...)}, nil
}

// RawRelayError recognises a raw relay_error map by its single key: a
// generic decode would also "succeed" on any upstream body, skipping its
// keys.
func RawRelayError(payload []byte) (wire.RelayFailure, bool) {
	n, rest, err := msgp.ReadMapHeaderBytes(payload)
	if err != nil || n != 1 || !hasKey(rest, "relay_error") {
		return wire.RelayFailure{}, false
	}
	var r wire.RelayErrorReply
	if rest, err = r.UnmarshalMsg(payload); err != nil || len(rest) != 0 {
		return wire.RelayFailure{}, false
	}
	return r.RelayError, true
}

// hasKey reports whether the map entry at b is keyed key.
func hasKey(b []byte, key string) bool {
	k, _, err := msgp.ReadStringZC(b)
	return err == nil && string(k) == key
}

// nonNil keeps "empty body" distinct from "no response".
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
