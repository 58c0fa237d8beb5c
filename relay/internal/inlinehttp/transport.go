// Package inlinehttp is an HTTP/1.1 client transport for cleartext
// upstreams that does each request's I/O on the calling goroutine.
//
// net/http's Transport hands every request to its connection's writer
// goroutine and the response back from its reader goroutine. A caller that
// waits for its answer anyway (the relay's pumps: one request in flight
// each) pays two goroutine wake-ups per request for nothing, which on a
// loaded host is a fifth of a small request's round trip. Here the caller
// writes the request, reads the response head and, through the body,
// the rest, on its own goroutine.
//
// It decides: connection reuse (per host:port, newest idle first; one the
// upstream closed while idle is found before use and dropped, one idle past
// IdleTimeout is closed), a bound on connections in existence (callers queue past it),
// and that a cancelled request's context interrupts its blocking I/O. It
// never retries: a request that failed is the caller's to judge.
//
// It does not do TLS, HTTP/2, proxies, redirects or compression: callers
// with an https:// or proxied upstream use net/http's Transport.
package inlinehttp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Options configures a Transport; zero values take the defaults.
type Options struct {
	// MaxConns bounds the connections in existence; 0 is no bound.
	MaxConns int
	// MaxIdle bounds the connections kept for reuse (default 8192).
	MaxIdle int
	// IdleTimeout closes a connection idle this long (default 90 s).
	IdleTimeout time.Duration
	// Dial makes a connection (default: a net.Dialer with a 10 s timeout).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock for idle times (default time.Now).
	Now func() time.Time
}

// Transport is an http.RoundTripper for http:// URLs. It is safe for
// concurrent use; each request uses a connection of its own.
type Transport struct {
	opt   Options
	slots chan struct{} // a token per connection in existence; nil: no bound

	mu    sync.Mutex
	idle  map[string][]*conn // by host:port, oldest first
	nIdle int                // the connections in idle, for MaxIdle
}

type conn struct {
	t       *Transport
	addr    string // host:port, the key in Transport.idle
	c       net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	idledAt time.Time
}

// New returns a Transport with opt's settings.
func New(opt Options) *Transport {
	if opt.MaxIdle <= 0 {
		opt.MaxIdle = 8192
	}
	if opt.IdleTimeout <= 0 {
		opt.IdleTimeout = 90 * time.Second
	}
	if opt.Dial == nil {
		opt.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	t := &Transport{opt: opt, idle: map[string][]*conn{}}
	if opt.MaxConns > 0 {
		t.slots = make(chan struct{}, opt.MaxConns)
	}
	return t
}

// ErrScheme is returned for a URL that is not http://.
var ErrScheme = errors.New("inlinehttp: only http:// URLs")

// bufSize is each connection's read and write buffer: a small request goes
// out in one write, and a small response head comes in with one read.
const bufSize = 4 << 10

// RoundTrip implements http.RoundTripper. The response body must be read
// to its end and closed for the connection to be reused; closing it early
// closes the connection.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" {
		closeBody(req)
		return nil, ErrScheme
	}
	ctx := req.Context()
	pc, err := t.conn(ctx, canonicalAddr(req))
	if err != nil {
		closeBody(req)
		return nil, err
	}
	// Cancellation (a caller giving up, a timeout) must end a write to or
	// a read from an upstream that went quiet: a deadline in the past
	// wakes the blocked call at once.
	stop := context.AfterFunc(ctx, func() { pc.c.SetDeadline(time.Unix(1, 0)) })
	resp, err := pc.exchange(req)
	if err != nil {
		stop()
		pc.close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	resp.Body = &body{pc: pc, rc: resp.Body, stop: stop, reusable: !resp.Close && !req.Close}
	return resp, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// canonicalAddr is the URL's host:port, port 80 when the URL names none.
func canonicalAddr(req *http.Request) string {
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(req.URL.Hostname(), port)
}

// exchange writes req and reads the response head, skipping 1xx preambles.
func (pc *conn) exchange(req *http.Request) (*http.Response, error) {
	err := req.Write(pc.bw)
	if err == nil {
		err = pc.bw.Flush()
	}
	if err != nil {
		return pc.earlyResponse(req, fmt.Errorf("inlinehttp: write request: %w", err))
	}
	return pc.readResponse(req)
}

// earlyWait bounds the wait for an answer the upstream may have sent
// before it stopped reading the request.
const earlyWait = time.Second

// earlyResponse looks for the answer an upstream sent before it stopped
// reading a request body (a 413 for a body over its limit, say), so the
// caller gets that answer rather than the broken pipe it caused. The
// connection is not reused either way.
func (pc *conn) earlyResponse(req *http.Request, werr error) (*http.Response, error) {
	if req.Context().Err() != nil {
		return nil, werr
	}
	pc.c.SetReadDeadline(time.Now().Add(earlyWait))
	resp, err := pc.readResponse(req)
	if err != nil {
		return nil, werr
	}
	resp.Close = true
	return resp, nil
}

func (pc *conn) readResponse(req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, fmt.Errorf("inlinehttp: read response: %w", err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		return resp, nil
	}
}

// conn returns a reusable idle connection, else a new one once the bound
// allows.
func (t *Transport) conn(ctx context.Context, addr string) (*conn, error) {
	for pc := t.popIdle(addr); pc != nil; pc = t.popIdle(addr) {
		if pc.stillOpen() {
			return pc, nil
		}
		pc.close()
	}
	if t.slots != nil {
		select {
		case t.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	c, err := t.opt.Dial(ctx, "tcp", addr)
	if err != nil {
		t.release()
		return nil, fmt.Errorf("inlinehttp: %w", err)
	}
	return &conn{t: t, addr: addr, c: c, br: bufio.NewReaderSize(c, bufSize), bw: bufio.NewWriterSize(c, bufSize)}, nil
}

// popIdle takes the newest idle connection to addr, after closing those
// idle past IdleTimeout.
func (t *Transport) popIdle(addr string) *conn {
	t.mu.Lock()
	expired := t.takeExpiredLocked()
	var pc *conn
	if list := t.idle[addr]; len(list) > 0 {
		n := len(list)
		pc = list[n-1]
		list[n-1] = nil
		t.setIdleLocked(addr, list[:n-1])
	}
	t.mu.Unlock()
	closeAll(expired)
	return pc
}

func (t *Transport) putIdle(pc *conn) {
	pc.idledAt = t.opt.Now()
	t.mu.Lock()
	expired := t.takeExpiredLocked()
	if t.nIdle < t.opt.MaxIdle {
		t.setIdleLocked(pc.addr, append(t.idle[pc.addr], pc))
		pc = nil
	}
	t.mu.Unlock()
	closeAll(expired)
	if pc != nil {
		pc.close()
	}
}

// setIdleLocked makes list addr's idle connections, keeping nIdle.
func (t *Transport) setIdleLocked(addr string, list []*conn) {
	t.nIdle += len(list) - len(t.idle[addr])
	if len(list) == 0 {
		delete(t.idle, addr)
		return
	}
	t.idle[addr] = list
}

// takeExpiredLocked removes the connections idle past IdleTimeout. In
// each address's list idle times grow toward the front, so they are a
// prefix.
func (t *Transport) takeExpiredLocked() []*conn {
	cutoff := t.opt.Now().Add(-t.opt.IdleTimeout)
	var expired []*conn
	for addr, list := range t.idle {
		n := 0
		for n < len(list) && list[n].idledAt.Before(cutoff) {
			n++
		}
		if n == 0 {
			continue
		}
		expired = append(expired, list[:n]...)
		rest := copy(list, list[n:])
		clear(list[rest:])
		t.setIdleLocked(addr, list[:rest])
	}
	return expired
}

func closeAll(conns []*conn) {
	for _, pc := range conns {
		pc.close()
	}
}

// CloseIdleConnections closes the connections kept for reuse; those in use
// are unaffected.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.nIdle = map[string][]*conn{}, 0
	t.mu.Unlock()
	for _, list := range idle {
		closeAll(list)
	}
}

func (t *Transport) release() {
	if t.slots != nil {
		<-t.slots
	}
}

func (pc *conn) close() {
	pc.c.Close()
	pc.t.release()
}

// stillOpen looks at an idle connection without waiting. An idle HTTP/1.1
// connection has nothing to read, so a byte or end-of-file means the
// upstream closed it (an idle timeout) or broke protocol while it sat in
// the pool; sending a request on it would fail, or be answered by
// whatever was there.
func (pc *conn) stillOpen() bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	sc, ok := pc.c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return idleOpen(rc)
}

// body hands the connection back for reuse once the response body was read
// to its end, and closes the connection otherwise.
type body struct {
	pc       *conn
	rc       io.ReadCloser
	stop     func() bool
	reusable bool // the response did not ask to close
	eof      bool
	closed   bool
}

var errBodyClosed = errors.New("inlinehttp: read on a closed response body")

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errBodyClosed
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	interrupted := !b.stop()
	if !b.eof || interrupted || !b.reusable {
		// Unread bytes would be taken for the next response; an
		// interrupted connection has a deadline in the past.
		b.pc.close()
		return nil
	}
	b.pc.t.putIdle(b.pc)
	return nil
}
