package planeserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Request bodies are read under deadlines, as nginx's client_body_timeout
// reads them: net/http bounds the headers (ReadHeaderTimeout) but sets no
// deadline at all while a handler reads the body, so a client announcing
// a length and sending a byte every few seconds would hold its
// connection for as long as it liked. Every body is wrapped in a
// timedBody that arms the connection's read deadline before each read:
// the next byte must come within BodyIdleTimeout, and the whole body
// within wire.BodyDeadline(BodyTimeout, its length). When the body ends
// the deadline is lifted, so a parked long-poll is not cut off by it.

// lingerAfterRefusal bounds how long the rest of a body the handler did
// not read is read and dropped after the reply (nginx's lingering close):
// long enough for a client that was still sending to finish and read the
// reply instead of a reset, short enough that a trickler gains nothing.
const lingerAfterRefusal = time.Second

// errLargeBodyBusy is a body that found no free large-body slot in time.
var errLargeBodyBusy = errors.New("planeserver: every large-body slot stayed busy")

// bodyTimeoutError is a body that missed one of its deadlines.
type bodyTimeoutError struct {
	idle  bool          // no byte came within the idle timeout
	after time.Duration // the bound that was missed
}

func (e *bodyTimeoutError) Error() string {
	if e.idle {
		return fmt.Sprintf("no byte of the request body came for %s", e.after)
	}
	return fmt.Sprintf("the request body did not arrive in whole within %s", e.after)
}

func (e *bodyTimeoutError) Unwrap() error { return os.ErrDeadlineExceeded }

// timedBody is a request body read under the body deadlines. It is the
// request's r.Body from guardBodies on; readBody finds it there to take a
// large-body slot.
type timedBody struct {
	s   *Server
	src io.ReadCloser
	rc  *http.ResponseController
	// announced is the Content-Length, or the route's limit once readBody
	// knows it (a chunked body announces none).
	announced int64
	start     time.Time // when the whole-body clock started
	total     time.Duration
	eof       bool
	// slot is set while the body holds a large-body slot.
	slot bool
}

// guardBodies puts every request body under the body deadlines and,
// once the handler returns, frees the body's large-body slot and bounds
// what is still read of a body the handler left unread.
func (s *Server) guardBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			// No body: net/http is already watching the connection for
			// the client's departure, under no deadline, and a parked
			// request needs it to stay that way.
			next.ServeHTTP(w, r)
			return
		}
		b := &timedBody{s: s, src: r.Body, rc: http.NewResponseController(w), announced: r.ContentLength}
		b.restart(time.Now())
		// Until a handler reads, net/http's own reads (it drains an
		// unread body before replying) are bounded too.
		b.arm(time.Now())
		defer b.finish()
		// A copy carries the wrapped body: net/http keeps looking at its
		// own request's body to decide how to close the connection.
		r = r.WithContext(r.Context())
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// boundChunked gives a chunked body sent to h (which reads r.Body itself,
// not through readBody) the whole-body bound of a body of limit bytes, as
// readBody does for its routes: it announced no length, and the bare
// base would cut off a large upload sent at an ordinary pace.
func boundChunked(h http.Handler, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tb, ok := r.Body.(*timedBody); ok && r.ContentLength < 0 {
			tb.announced = limit
			tb.restart(tb.start)
		}
		h.ServeHTTP(w, r)
	})
}

// restart starts the whole-body clock at now.
func (b *timedBody) restart(now time.Time) {
	b.start = now
	b.total = wire.BodyDeadline(b.s.cfg.BodyTimeout, max(b.announced, 0))
}

// arm sets the connection's read deadline for the next read: the idle
// bound, or the whole-body bound when it comes first. A response writer
// that has no connection (a test's) has no deadlines to set.
func (b *timedBody) arm(now time.Time) {
	next, whole := now.Add(b.s.cfg.BodyIdleTimeout), b.start.Add(b.total)
	if whole.Before(next) {
		next = whole
	}
	_ = b.rc.SetReadDeadline(next)
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	now := time.Now()
	b.arm(now)
	n, err := b.src.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
		// The body is in; what follows on the connection is the next
		// request, or the client going away while a poll is parked, and
		// no body deadline may cut that off. (net/http lifts the
		// deadline too when, at the body's end, it starts watching the
		// connection; this does not depend on it.)
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		now = time.Now()
		if now.Before(b.start.Add(b.total)) {
			return n, &bodyTimeoutError{idle: true, after: b.s.cfg.BodyIdleTimeout}
		}
		return n, &bodyTimeoutError{after: b.total}
	}
	return n, err
}

func (b *timedBody) Close() error { return b.src.Close() }

// finish runs when the handler has returned: it frees the slot, and
// bounds what remains of a body the handler left unread (a refusal that
// did not need it) to lingerAfterRefusal, so that net/http, which drains
// such a body before it closes the connection, does not do so at the
// client's pace.
func (b *timedBody) finish() {
	if b.slot {
		b.slot = false
		b.s.largeBodyFreed.Store(true)
		<-b.s.largeBodies
	}
	if !b.eof {
		linger, whole := time.Now().Add(lingerAfterRefusal), b.start.Add(b.total)
		if whole.Before(linger) {
			linger = whole
		}
		_ = b.rc.SetReadDeadline(linger)
	}
}

// takeSlot takes a large-body slot, waiting up to LargeBodyWait, and
// restarts the whole-body clock: a body does not lose the time it waited.
func (b *timedBody) takeSlot(ctx context.Context) error {
	if b.slot {
		return nil
	}
	t := time.NewTimer(b.s.cfg.LargeBodyWait)
	defer t.Stop()
	select {
	case b.s.largeBodies <- struct{}{}:
		b.slot = true
		b.s.collectLargeGarbage()
		b.restart(time.Now())
		return nil
	case <-t.C:
		return errLargeBodyBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}

// collectLargeGarbage runs a garbage collection when a large body has
// been let go since the last one, before a new large body is read.
// Without it the collector, pacing itself on a heap that held large
// bodies when it last ran, lets the next ones be allocated beside the
// garbage of the last: two slots of 16 MiB took serve's resident memory
// some 75 MiB over its idle size. A collection here costs a few
// milliseconds of one core per large body, and lets a new body reuse
// the memory of one that is gone.
func (s *Server) collectLargeGarbage() {
	if s.largeBodyFreed.Swap(false) {
		runtime.GC()
	}
}

// readBody reads a whole request body of at most limit bytes. A body over
// wire.LargeBodyBytes first takes a large-body slot, held until the
// handler returns. On any failure it answers itself (413 over the limit,
// 408 past a deadline, 503 with Retry-After when no slot came free, 400
// for a broken body) and returns ok=false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64, asJSON bool) ([]byte, bool) {
	if r.ContentLength > limit {
		refuseBody(w, http.StatusRequestEntityTooLarge, asJSON, fmt.Sprintf("body of %d bytes exceeds the %d-byte limit", r.ContentLength, limit))
		return nil, false
	}
	tb, _ := r.Body.(*timedBody)
	if tb != nil && r.ContentLength < 0 {
		tb.announced = limit
		tb.restart(tb.start)
	}
	// takeSlot takes a large-body slot before memory is spent on a body
	// over LargeBodyBytes: at once when its length is announced, when it
	// grows past it otherwise.
	takeSlot := func(size int64) bool {
		if tb == nil || tb.slot || size <= wire.LargeBodyBytes {
			return true
		}
		err := tb.takeSlot(r.Context())
		if errors.Is(err, errLargeBodyBusy) {
			w.Header().Set("Retry-After", strconv.Itoa(wire.LargeBodyRetryAfterS))
			refuseBody(w, http.StatusServiceUnavailable, asJSON, fmt.Sprintf(
				"%d bodies over %d bytes are being read already and none finished within %s; retry later",
				cap(s.largeBodies), wire.LargeBodyBytes, s.cfg.LargeBodyWait))
		}
		return err == nil
	}
	if !takeSlot(r.ContentLength) {
		return nil, false
	}
	var in bodyBlocks
	for {
		if !takeSlot(in.n) {
			return nil, false
		}
		n, err := r.Body.Read(in.space(r.ContentLength, limit))
		in.grew(n)
		if in.n > limit {
			refuseBody(w, http.StatusRequestEntityTooLarge, asJSON, fmt.Sprintf("body exceeds the %d-byte limit", limit))
			return nil, false
		}
		if errors.Is(err, io.EOF) {
			return in.join(), true
		}
		var late *bodyTimeoutError
		switch {
		case errors.As(err, &late):
			s.log.Debug("request body timed out", "path", r.URL.Path, "read", in.n, "err", late)
			refuseBody(w, http.StatusRequestTimeout, asJSON, late.Error())
			return nil, false
		case err != nil:
			refuseBody(w, http.StatusBadRequest, asJSON, "reading body: "+err.Error())
			return nil, false
		}
	}
}

// A body whose length is announced is read into one buffer of exactly
// that size. A chunked body announces none, and growing one buffer by
// append would copy it at every step and leave each old buffer behind as
// garbage: a 16 MiB body cost some 35 MiB that way. It is read into
// blocks instead, each filled before the next is made, and joined once
// at the end. Past wire.LargeBodyBytes, when it holds a large-body slot,
// it moves into one buffer the size of the route's limit, so that the
// memory a slot costs is that limit, never twice it.
const (
	firstChunkedBlock = 64 << 10
	maxChunkedBlock   = 1 << 20
)

// bodyBlocks is a request body as it is read.
type bodyBlocks struct {
	blocks [][]byte // each full but the last
	n      int64    // bytes read in all
}

// space returns where the next read goes: the rest of the last block,
// or a new block when it is full. announced is the Content-Length (-1
// when chunked); no block reaches past limit+1, the one byte that shows
// a body is over its limit.
func (in *bodyBlocks) space(announced, limit int64) []byte {
	if k := len(in.blocks); k > 0 {
		if last := in.blocks[k-1]; len(last) < cap(last) {
			return last[len(last):cap(last)]
		}
	}
	if announced < 0 && in.n >= wire.LargeBodyBytes {
		// A chunked body this large holds a large-body slot: from here
		// it is read into one buffer as large as the route allows, what
		// came so far copied to its start, so that it is never joined.
		whole := make([]byte, 0, limit+1)
		for _, b := range in.blocks {
			whole = append(whole, b...)
		}
		in.blocks = [][]byte{whole}
		return whole[len(whole):cap(whole)]
	}
	size := int64(firstChunkedBlock)
	switch {
	case announced >= 0 && len(in.blocks) == 0:
		// One spare byte: the body ends with a read of its last bytes or
		// an empty one that reports the end, and the spare byte keeps
		// that read from needing a second block.
		size = announced + 1
	case len(in.blocks) > 0:
		size = min(2*int64(cap(in.blocks[len(in.blocks)-1])), maxChunkedBlock)
	}
	block := make([]byte, 0, min(size, limit+1-in.n))
	in.blocks = append(in.blocks, block)
	return block[:cap(block)]
}

// grew records n bytes read into the space last returned.
func (in *bodyBlocks) grew(n int) {
	if n == 0 {
		return
	}
	last := &in.blocks[len(in.blocks)-1]
	*last = (*last)[:len(*last)+n]
	in.n += int64(n)
}

// join returns the body as one slice; a body read into one block is that
// block, with no copy.
func (in *bodyBlocks) join() []byte {
	switch len(in.blocks) {
	case 0:
		return []byte{}
	case 1:
		return in.blocks[0]
	}
	body := make([]byte, 0, in.n)
	for _, b := range in.blocks {
		body = append(body, b...)
	}
	in.blocks = nil
	return body
}

// refuseBody answers a request whose body is not (or not wholly) read,
// and closes its connection after the reply: the rest of the body is
// never read, so the client need not send it and cannot hold the
// connection by trickling it.
func refuseBody(w http.ResponseWriter, status int, asJSON bool, msg string) {
	w.Header().Set("Connection", "close")
	writeError(w, status, asJSON, msg)
}
