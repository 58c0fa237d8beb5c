// Package transport defines how the daemon's requests reach the control
// plane, whatever carries them: direct HTTP, a FIFO relay, or a spool
// directory. Each carrier lives in its own hostio package and implements
// Transport; the daemon driver depends only on this interface.
//
// It decides the request/response shape and which failures are transport
// errors. It does not decide retries or backoff: those are the daemon core's.
package transport

import (
	"context"
	"fmt"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// RelayedTimeout bounds one request carried through a relay (a FIFO or a
// spool file): it exceeds the relay's default upstream timeout (120 s), so
// the relay's own verdict on a slow upstream arrives before the daemon
// gives up, and a relay that answers raw frames never answers a request
// the daemon abandoned.
const RelayedTimeout = 130 * time.Second

// Lane names which pipe a request travels on when the carrier has several:
// long-polls use LanePoll so that acks, results and chunks (LaneControl)
// never wait behind a 20-second poll.
type Lane string

// The two lanes the daemon uses.
const (
	LanePoll    Lane = ""
	LaneControl Lane = "ctl"
)

// Request is one POST to the control plane.
type Request struct {
	// Endpoint is an absolute path ("/v1/daemon/poll") or, for a log sink
	// URL handed out by the server, a full URL.
	Endpoint string
	// ContentType defaults to application/x-msgpack when empty.
	ContentType string
	Body        []byte
	// Headers are extra X-LS-* headers (request signing).
	Headers map[string]string
	Lane    Lane
}

// Envelope is req as the relay envelope that carries it, asking for an id
// reply when id is not empty (docs/protocol.md, "Request envelope").
func (req *Request) Envelope(id string) wire.RelayRequest {
	return wire.RelayRequest{Endpoint: req.Endpoint, Headers: req.Headers, ContentType: req.ContentType, ID: id, Body: req.Body}
}

// Response is the control plane's answer, whatever its status.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
	// RetryAfter is the answer's Retry-After (whole seconds), 0 when it
	// has none (or it came through a relay, whose replies carry no
	// headers).
	RetryAfter time.Duration
}

// Transport carries one request and returns the response. A non-nil error
// means no response arrived (connection refused, relay absent, timeout);
// a non-2xx status is returned as a Response, not as an error.
type Transport interface {
	RoundTrip(ctx context.Context, req *Request) (*Response, error)
	// CanWithdraw reports whether cancelling a request's context withdraws
	// the request itself, so the control plane hands nothing more to it:
	// true for direct HTTP, whose closed connection ends the request at
	// the plane. A relay carrier says false: the relay has already
	// forwarded the request, the upstream request keeps going and may
	// still take commands, and cancelling only abandons the reply. The
	// daemon never cuts a long-poll off on such a carrier (the core's
	// KeepPollOnWake, set from this answer, and the loop both read it).
	CanWithdraw() bool
}

// StatusError reports a response whose status is not 2xx.
type StatusError struct {
	Endpoint string
	Status   int
	Body     []byte
}

func (e *StatusError) Error() string {
	body := e.Body
	if len(body) > 200 {
		body = body[:200]
	}
	return fmt.Sprintf("transport: POST %s: status %d: %q", e.Endpoint, e.Status, body)
}

// Check turns a non-2xx response into a *StatusError.
func Check(req *Request, resp *Response) error {
	if resp.Status < 200 || resp.Status > 299 {
		return &StatusError{Endpoint: req.Endpoint, Status: resp.Status, Body: resp.Body}
	}
	return nil
}
