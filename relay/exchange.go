//go:build unix

package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nymphd/nymph/relay/policy"
	"github.com/nymphd/nymph/wirecore/frame"
)

// headCap is the most of a payload the relay holds: a whole small frame, or
// the head of a large one (endpoint, headers, id) before its streamed body.
// It is also the copy buffer for streaming and draining.
const headCap = 64 << 10

// firstRead is how much of a large payload is read before the envelope is
// first parsed; a head is usually well under it.
const firstRead = 4 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, headCap); return &b }}

// Errors of a payload source. errStalled: no byte arrived for the frame
// timeout; errStopped: the pump was removed or the relay's grace ran out;
// errTruncated: a spool file ended inside its frame.
var (
	errStalled      = errors.New("frame stalled")
	errStopped      = errors.New("pump stopped")
	errTruncated    = errors.New("frame truncated")
	errUpstreamDone = errors.New("upstream finished with the body")
	// errCutOff: shutdown came while the frame was still being read,
	// before it went upstream.
	errCutOff = errors.New("frame cut off by shutdown")
	// errCallAbandoned is why an upstream call is cancelled when its
	// daemon sent a new frame.
	errCallAbandoned = errors.New("request abandoned by its daemon")
)

// errNoAnswer is why an upstream call is cancelled when the relay's
// upstream timeout passes: the daemon's relay_error then names the
// deadline.
func errNoAnswer(timeout time.Duration) error {
	return fmt.Errorf("no answer within %v: %w", timeout, context.DeadlineExceeded)
}

// upstreamLimit bounds one upstream call, a streamed body's upload
// included: it is cancelled at until, with errNoAnswer(timeout).
type upstreamLimit struct {
	timeout time.Duration
	until   time.Time
}

// payload is the byte source of one frame's payload: it returns io.EOF
// once the payload's announced length has been read, and never reads past
// it, so the next frame stays intact.
type payload interface {
	io.Reader
	// discard reads and drops the rest of the payload, using buf.
	discard(buf []byte) error
	// await returns the upstream's result of a fully read frame, which
	// call produces (blocking). A FIFO pump also watches its pipe while a
	// call is slow: a daemon sends one request at a time on a pipe, so a
	// byte of a new frame means it gave up on this one, and cancel is
	// called (as a closed connection would tell a plane reached directly).
	// abandoned reports that.
	// The source also bounds the call by lim, cancelling it with a cause
	// that says so. addressed says the reply carries the request's id, so
	// a daemon that moved on tells it from its new request's reply by
	// itself.
	await(call func() result, cancel context.CancelCauseFunc, lim upstreamLimit, addressed bool) (res result, abandoned bool)
	// forwarding says the frame is going upstream: from now on shutdown
	// gives it the grace instead of cutting it off.
	forwarding()
}

// reply is what the relay answers to one frame.
type reply struct {
	id       string // echoed in an id reply; empty for a raw reply
	status   int
	body     []byte
	message  string // the relay's own reason, for relay_error
	relayErr bool
	// stream, when set, is the body (length bytes) still to be read from
	// the upstream or a spill file while the reply is written; release
	// ends the upstream call it reads from. Whoever writes the reply calls
	// done.
	stream  io.ReadCloser
	length  int64
	release func()
}

// done releases what a streamed reply holds.
func (r *reply) done() {
	if r.stream != nil {
		r.stream.Close()
		r.stream = nil
	}
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// exchange is one frame's trip: read its head, check it, forward it, and
// decide the reply.
type exchange struct {
	rl     *Relay
	ctx    context.Context
	src    payload
	size   int64
	fileID string // the id a spool file is named by; "" for FIFOs
	buf    []byte
	have   int
	env    frame.Envelope
	id     string
}

// serveFrame handles one payload of size bytes (size may exceed the frame
// ceiling: the payload is then drained and refused). It reports false when
// no reply is due: the frame stalled, or the pump was removed.
func (rl *Relay) serveFrame(ctx context.Context, src payload, size int64, fileID string) (reply, bool) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	x := &exchange{rl: rl, ctx: ctx, src: src, size: size, fileID: fileID, buf: *bp, id: fileID}
	rl.metrics.frames.Add(1)
	return x.run()
}

func (x *exchange) run() (reply, bool) {
	if err := x.readHead(); err != nil {
		return x.headFailed(err)
	}
	if x.size > frame.MaxPayload {
		return x.refuse(http.StatusRequestEntityTooLarge, errOversize,
			fmt.Sprintf("frame of %d bytes exceeds the %d-byte ceiling", x.size, frame.MaxPayload))
	}
	if err := policy.CheckEndpoint(x.env.Endpoint); err != nil {
		return x.refuse(http.StatusBadRequest, errEndpoint, err.Error())
	}
	rq, err := x.request()
	if err != nil {
		return x.refuse(http.StatusBadRequest, errEnvelope, err.Error())
	}
	return x.forward(rq)
}

// readHead reads enough of the payload to parse the envelope's head and
// settles the id the reply is addressed to.
func (x *exchange) readHead() error {
	if x.size <= headCap {
		n, err := io.ReadFull(x.src, x.buf[:x.size])
		x.have = n
		if err != nil {
			return err
		}
	}
	want := min(x.size, firstRead)
	for {
		if int64(x.have) < want {
			n, err := io.ReadAtLeast(x.src, x.buf[x.have:min(int64(headCap), x.size)], int(want)-x.have)
			x.have += n
			if err != nil {
				return err
			}
		}
		env, err := frame.ReadEnvelope(x.buf[:x.have], int(x.size))
		x.env = env
		var short *frame.ShortError
		if !errors.As(err, &short) {
			return x.settleID(err)
		}
		if short.Need <= x.have {
			return x.settleID(fmt.Errorf("envelope: parser asked for %d bytes with %d held", short.Need, x.have))
		}
		if short.Need > headCap {
			x.settleID(nil)
			return fmt.Errorf("envelope keys after a body: the head needs %d bytes, more than %d", short.Need, headCap)
		}
		// At least double what is held before parsing again: a head sent
		// a byte at a time costs a few parses, not one per byte.
		want = min(int64(max(short.Need, 2*x.have)), int64(headCap), x.size)
	}
}

// settleID picks the id the reply goes to. A spool file's name is its id,
// and an envelope that names another is refused rather than answered under
// either name.
func (x *exchange) settleID(envErr error) error {
	id := x.env.ID
	switch {
	case x.fileID != "" && id != "" && id != x.fileID:
		return fmt.Errorf("envelope id %.80q differs from the file's %q", id, x.fileID)
	case x.fileID != "":
	case id != "" && !frame.ValidID(id):
		return fmt.Errorf("envelope id %.80q is not a valid id", id)
	default:
		x.id = id
	}
	return envErr
}

// headFailed answers a frame whose head could not be read or parsed. A
// frame whose bytes stopped before its head was whole is refused all the
// same when what came already refuses it (a length over the ceiling, an
// endpoint not allowed), and dropped otherwise, as any stalled frame.
func (x *exchange) headFailed(err error) (reply, bool) {
	if errors.Is(err, errStopped) || errors.Is(err, errCutOff) {
		return x.sourceFailed(err)
	}
	stalled := errors.Is(err, errStalled)
	if stalled {
		x.partialHead()
	}
	status, kind, msg := http.StatusBadRequest, errEnvelope, ""
	switch {
	case x.size > frame.MaxPayload:
		status, kind, msg = http.StatusRequestEntityTooLarge, errOversize,
			fmt.Sprintf("frame of %d bytes exceeds the %d-byte ceiling", x.size, frame.MaxPayload)
	case stalled && x.env.Endpoint != "":
		eerr := policy.CheckEndpoint(x.env.Endpoint)
		if eerr == nil {
			return x.sourceFailed(err)
		}
		kind, msg = errEndpoint, eerr.Error()
	case stalled:
		return x.sourceFailed(err)
	default:
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = errTruncated
		}
		msg = "not a relay envelope: " + err.Error()
	}
	if stalled {
		return x.refused(status, kind, msg) // its bytes stopped: none are left to drain
	}
	return x.refuse(status, kind, msg)
}

// partialHead takes what it can from the head read so far, its id and
// endpoint, for a frame whose bytes stopped before the head was whole.
func (x *exchange) partialHead() {
	if x.have == 0 || x.id != "" || x.fileID != "" {
		return
	}
	env, _ := frame.ReadEnvelope(x.buf[:x.have], int(x.size))
	x.env.Endpoint = env.Endpoint
	if frame.ValidID(env.ID) {
		x.id = env.ID
	}
}

// sourceFailed decides what a frame whose bytes stopped gets: nothing when
// it stalled (its writer is gone) or its pump was removed; a 503 when the
// relay's shutdown grace cut it off.
func (x *exchange) sourceFailed(err error) (reply, bool) {
	if errors.Is(err, errCutOff) {
		x.partialHead() // the id may have arrived before the frame was cut off
		return x.shutdownReply(), true
	}
	if errors.Is(err, errStalled) {
		x.rl.metrics.fail(errStall)
		x.rl.log.Warn("relay: partial frame dropped after the stall timer", "bytes_expected", x.size)
		return reply{}, false
	}
	if x.rl.hardStopped() {
		return x.shutdownReply(), true
	}
	return reply{}, false
}

func (x *exchange) shutdownReply() reply {
	x.rl.metrics.fail(errShutdown)
	return reply{id: x.id, status: http.StatusServiceUnavailable, message: msgShutdown, relayErr: true}
}

// msgShutdown is the relay_error message of a request cut off by shutdown.
const msgShutdown = "relay shutting down"

// refuse drains the rest of the frame, so the reply never races the
// daemon's next frame, and answers with status and message. A refused
// frame whose bytes stop coming (a daemon that sent a length it never
// meant to fill), or that shutdown cut off, is answered all the same once
// the stall timer fires: the refusal does not depend on the bytes left.
func (x *exchange) refuse(status int, kind errKind, msg string) (reply, bool) {
	if err := x.src.discard(x.buf); err != nil && !errors.Is(err, errStalled) && !errors.Is(err, errCutOff) {
		return x.sourceFailed(err)
	}
	return x.refused(status, kind, msg)
}

// refused answers a frame refused with status and message, once nothing
// of it is left to read.
func (x *exchange) refused(status int, kind errKind, msg string) (reply, bool) {
	x.rl.metrics.fail(kind)
	x.rl.log.Info("relay: frame refused", "status", status, "reason", msg)
	return reply{id: x.id, status: status, message: msg, relayErr: true}, true
}

// request checks the envelope's headers and content type.
func (x *exchange) request() (*request, error) {
	rq := &request{endpoint: x.env.Endpoint, contentType: x.env.ContentType, bodyLen: int64(x.env.BodyLen)}
	if !policy.ValidContentType(rq.contentType) {
		return nil, errors.New("content_type is not a valid header value")
	}
	for k, v := range x.env.Headers {
		name, ok, err := policy.ForwardHeader(k, v)
		if err != nil {
			return nil, err
		}
		if ok {
			if rq.headers == nil {
				rq.headers = make(http.Header, len(x.env.Headers))
			}
			rq.headers[name] = []string{v}
		}
	}
	return rq, nil
}

// forward sends the body upstream: from memory when it was read whole with
// the head, else streamed from the source as it arrives.
func (x *exchange) forward(rq *request) (reply, bool) {
	off, end := x.env.BodyOffset, x.env.BodyOffset+x.env.BodyLen
	x.src.forwarding()
	// One context for the whole trip upstream: the source's await cancels
	// it on the relay's timeout or when its daemon gives up. A reply
	// streamed back keeps it until the reply is written (streamed).
	//
	// Its parent is the relay's hard-stop context, not the pump's: a child
	// of the pump's context would leave the pump holding a Done channel and
	// a map of children from its first frame on (half a kilobyte a pump,
	// 5 MB at 10,000 pairs). A pump that is removed cancels its call
	// itself (pump.kill).
	ctx, cancel := context.WithCancelCause(x.rl.hard)
	streamed := false
	defer func() {
		if !streamed {
			cancel(nil)
		}
	}()
	timeout := x.rl.up.timeout
	lim := upstreamLimit{timeout: timeout, until: time.Now().Add(timeout)}
	answer := func(res result, abandoned bool) (reply, bool) {
		rep, send := x.answer(res, abandoned)
		if rep.stream != nil {
			streamed = true
			rep.release = guardStream(cancel, timeout)
		}
		return rep, send
	}
	if x.have >= end {
		// The buffer is reused for the next frame while the HTTP transport
		// may still hold the body, so the body gets its own copy.
		rq.body = bytes.NewReader(bytes.Clone(x.buf[off:end]))
		if err := x.src.discard(x.buf); err != nil {
			return x.sourceFailed(err)
		}
		// Posted from this goroutine: a small frame's round trip is what
		// the relay's latency is, and every hand-off to another goroutine
		// adds a wake-up to it.
		return answer(x.src.await(func() result { return x.rl.post(ctx, rq) }, cancel, lim, x.id != ""))
	}
	done := make(chan result, 1)
	pr, pw := io.Pipe()
	rq.body = pr
	go func() {
		res := x.rl.post(ctx, rq)
		pr.CloseWithError(errUpstreamDone) // the pump then drains the rest itself
		done <- res
	}()
	// The upload counts against the call's timeout: an upstream that
	// takes the connection and stops reading would otherwise hold this
	// pump (and its daemon) in the write below for good. Cancelled, the
	// call ends, the pipe's reader closes, and the rest of the body is
	// read and dropped.
	upload := time.AfterFunc(timeout, func() { cancel(errNoAnswer(timeout)) })
	err := x.stream(pw, x.buf[off:x.have], int64(end-x.have))
	upload.Stop()
	pw.CloseWithError(err) // nil: EOF, the body is complete
	if err == nil {
		err = x.src.discard(x.buf)
	}
	if err != nil {
		cancel(err)
		<-done
		return x.sourceFailed(err)
	}
	return answer(x.src.await(func() result { return <-done }, cancel, lim, x.id != ""))
}

// guardStream bounds the reading of a streamed reply by the upstream
// timeout, counted afresh from the reply's head, and returns what ends the
// call once the reply is written.
func guardStream(cancel context.CancelCauseFunc, timeout time.Duration) func() {
	t := time.AfterFunc(timeout, func() { cancel(errNoAnswer(timeout)) })
	return func() {
		t.Stop()
		cancel(nil)
	}
}

// stream copies the body to the upstream's pipe: held first, then rest
// bytes from the source. When the upstream stops reading (it answered or
// failed), the remaining body bytes are still read and dropped so the
// stream stays in step. Only a source failure is returned.
func (x *exchange) stream(pw *io.PipeWriter, held []byte, rest int64) error {
	_, werr := pw.Write(held)
	for rest > 0 {
		n, err := x.src.Read(x.buf[:min(int64(len(x.buf)), rest)])
		rest -= int64(n)
		if n > 0 && werr == nil {
			_, werr = pw.Write(x.buf[:n])
		}
		switch {
		case err == nil:
		case err == io.EOF && rest == 0:
			return nil
		case err == io.EOF:
			return errTruncated
		default:
			return err
		}
	}
	return nil
}

// answer turns the upstream's result into the reply.
func (x *exchange) answer(res result, abandoned bool) (reply, bool) {
	switch {
	case abandoned:
		res.close()
		x.rl.metrics.fail(errAbandoned)
		x.rl.log.Debug("relay: request abandoned by its daemon", "endpoint", x.env.Endpoint)
		return reply{}, false
	case res.err == nil:
		if res.status < 200 || res.status > 299 {
			x.rl.metrics.fail(errStatus)
		}
		rep := reply{id: x.id, status: res.status, body: res.body, stream: res.stream, length: res.length}
		if n := rep.payloadLen(); n > frame.MaxPayload {
			rep.done()
			x.rl.metrics.fail(errUpstream)
			msg := fmt.Sprintf("reply of %d bytes framed exceeds the %d-byte ceiling", n, frame.MaxPayload)
			x.rl.log.Warn("relay: reply too large to frame", "endpoint", x.env.Endpoint, "bytes", n)
			return reply{id: x.id, status: 0, message: msg, relayErr: true}, true
		}
		return rep, true
	case x.rl.hardStopped():
		return x.shutdownReply(), true
	case x.ctx.Err() != nil:
		return reply{}, false // the pump was removed: nobody to answer
	}
	x.rl.metrics.fail(errUpstream)
	x.rl.log.Warn("relay: upstream failed", "endpoint", x.env.Endpoint, "err", res.err)
	return reply{id: x.id, status: 0, message: res.err.Error(), relayErr: true}, true
}

// post forwards rq and records its latency.
func (rl *Relay) post(ctx context.Context, rq *request) result {
	start := time.Now()
	res := rl.up.post(ctx, rq)
	rl.metrics.observe(time.Since(start))
	return res
}
