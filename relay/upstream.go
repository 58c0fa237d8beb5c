//go:build unix

package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/relay/internal/inlinehttp"
	"github.com/nymphd/nymph/relay/policy"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// heldReply is the largest upstream reply the relay reads whole before
// framing it; daemon routes answer in kilobytes. A larger reply is
// streamed into the reply pipe (or spool file) as it is read, up to the
// frame ceiling, at constant memory: one of known length straight from the
// connection, one of unknown length (chunked) through a spill file that
// learns its length first.
const heldReply = headCap

// defaultContentType is what the daemon's bodies are unless the envelope
// says otherwise (raw log chunks).
const defaultContentType = wire.ContentTypeMsgpack

// upstream is the one HTTP transport every pump shares.
type upstream struct {
	transport http.RoundTripper
	base      policy.Base
	token     func() string
	timeout   time.Duration
	// auth is the Authorization header of the current token, made once
	// per token rather than once per request.
	auth atomic.Pointer[authHeader]
}

type authHeader struct {
	token string
	value []string
}

// authorization returns the header value for the current token. Requests
// share the slice: a RoundTripper does not modify its request.
func (u *upstream) authorization() []string {
	tok := u.token()
	if a := u.auth.Load(); a != nil && a.token == tok {
		return a.value
	}
	a := &authHeader{token: tok, value: []string{"Bearer " + tok}}
	u.auth.Store(a)
	return a.value
}

// defaultContentTypeHeader and acceptHeader are shared by every
// request, as auth is. Every request accepts msgpack, as a daemon's own
// do (spec 001's transport table): the relay is the daemon's client.
var (
	defaultContentTypeHeader = []string{defaultContentType}
	acceptHeader             = []string{wire.ContentTypeMsgpack}
)

// defaultTransport is what carries the relay's requests when Config names
// no client; proxy is http.ProxyFromEnvironment outside tests.
//
// A cleartext upstream reached without a proxy gets inlinehttp's
// transport: a pump waits for its one request anyway, so the request and
// response are written and read on the pump's goroutine, which saves the
// two goroutine hand-offs per frame of net/http's Transport (a fifth of a
// small frame's round trip).
//
// Anything else (https, whose HTTP/2 lets thousands of parked long-polls
// share a few connections, or a proxy from the environment) gets
// net/http's Transport, as many of them as keep each one's requests in
// flight under a connection's stream limit (transportPool), each verifying
// the upstream with tlsCfg (tlsca.ClientConfig: TLS 1.3, the relay's CA
// file or the system's roots; nil: newTransport's, the system's roots).
func defaultTransport(base policy.Base, maxConns int, proxy func(*http.Request) (*url.URL, error), tlsCfg *tls.Config) http.RoundTripper {
	u := base.URL("/")
	if u.Scheme == "http" {
		if via, err := proxy(&http.Request{URL: u}); err == nil && via == nil {
			return inlinehttp.New(inlinehttp.Options{MaxConns: maxConns})
		}
	}
	return newTransportPool(maxConns, func(maxConns int) *http.Transport {
		t := newTransport(maxConns)
		if tlsCfg != nil {
			t.TLSClientConfig = tlsCfg.Clone()
		}
		return t
	})
}

// newTransport is net/http's Transport as the relay uses it: one pool of
// keep-alive connections, HTTP/2 over TLS, sized for thousands of requests
// in flight.
//
// maxConns bounds its connections to the upstream (0: no bound). Over
// HTTP/1.1 every request in flight holds a connection and an fd; past the
// bound requests queue for one instead of failing with EMFILE and starving
// the pipes of descriptors.
func newTransport(maxConns int) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS13},
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          8192,
		MaxIdleConnsPerHost:   8192,
		MaxConnsPerHost:       maxConns,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// NewClient returns an HTTP client on one newTransport (maxConns as there),
// for a caller that sets Config.Client, say to add its own roots of trust.
// Redirects are returned rather than followed, so the relay's bearer never
// leaves the upstream's origin.
func NewClient(maxConns int) *http.Client {
	return &http.Client{
		Transport: newTransport(maxConns),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// request is what a frame asks of the upstream once it passed the checks.
type request struct {
	endpoint    string
	contentType string
	headers     http.Header // X-LS-* only
	body        io.Reader
	bodyLen     int64
}

// result is the upstream's answer. err is set when no response arrived.
// A reply larger than heldReply comes as stream (of length bytes) instead
// of body; whoever takes the result closes it.
type result struct {
	status int
	body   []byte
	stream io.ReadCloser
	length int64
	err    error
}

// close releases a streamed body that will not be read.
func (r *result) close() {
	if r.stream != nil {
		r.stream.Close()
		r.stream = nil
	}
}

// post sends one request and reads the reply: whole when it is small,
// else as a stream the caller delivers and closes. It never retries: the
// relay is a byte-mover and the daemon owns retries. ctx carries the
// upstream timeout; the caller sets it, and keeps ctx alive while it
// reads a streamed reply.
//
// The request goes straight to the client's transport: http.Client adds
// redirect handling the relay refuses anyway, and a copy of the headers
// per request; the URL is built from the parsed base, not re-parsed.
func (u *upstream) post(ctx context.Context, rq *request) result {
	var body io.ReadCloser = http.NoBody
	if rq.bodyLen > 0 {
		// A NopCloser over a *bytes.Reader is what the transport knows to
		// be in memory: it then writes the headers and a small body in one
		// write, where a reader of its own would cost a second one.
		body = io.NopCloser(rq.body)
	}
	// Built by hand: http.NewRequest would parse a URL the base already
	// parsed. No GetBody: a POST is never retried by the transport.
	target := u.base.URL(rq.endpoint)
	req := (&http.Request{
		Method: http.MethodPost, URL: target, Host: target.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(rq.headers)+3), Body: body, ContentLength: rq.bodyLen,
	}).WithContext(ctx)
	for k, v := range rq.headers {
		req.Header[k] = v
	}
	ct := rq.contentType
	if ct == "" {
		ct = defaultContentType
	}
	if ct == defaultContentType {
		req.Header["Content-Type"] = defaultContentTypeHeader
	} else {
		req.Header["Content-Type"] = []string{ct}
	}
	req.Header["Accept"] = acceptHeader
	req.Header["Authorization"] = u.authorization()
	resp, err := u.transport.RoundTrip(req)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx) // why the relay cancelled it, not just "canceled"
	}
	if err != nil {
		return result{err: fmt.Errorf("relay: POST %s: %w", rq.endpoint, tlsca.Explain(unwrapURL(err)))}
	}
	res, err := readReply(resp.Body, resp.ContentLength)
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return result{err: fmt.Errorf("relay: POST %s: read reply: %w", rq.endpoint, err)}
	}
	res.status = resp.StatusCode
	return res
}

// maxReplyBody is the most a reply body can be: a frame's payload.
const maxReplyBody = frame.MaxPayload

var errReplyTooLarge = fmt.Errorf("reply over the %d-byte frame ceiling", maxReplyBody)

// readReply reads a reply body of length bytes (-1: unknown) whole when it
// is at most heldReply, and otherwise returns it as a stream of known
// length, spilling a body of unknown length to a file first. It takes
// ownership of rc.
func readReply(rc io.ReadCloser, length int64) (result, error) {
	switch {
	case length > maxReplyBody:
		rc.Close()
		return result{}, errReplyTooLarge
	case length > heldReply:
		return result{stream: rc, length: length}, nil
	}
	data, err := readLimited(rc, length, heldReply)
	if err == nil {
		rc.Close()
		return result{body: data}, nil
	}
	if !errors.Is(err, errReplyHeld) {
		rc.Close()
		return result{}, err
	}
	// Chunked and larger than held: learn its length from a spill file.
	f, n, err := spill(io.MultiReader(bytes.NewReader(data), rc))
	rc.Close()
	if err != nil {
		return result{}, err
	}
	return result{stream: f, length: n}, nil
}

// spill copies r to an unlinked temporary file (in os.TempDir) and returns
// it rewound, with its length; a body over the frame ceiling is refused.
func spill(r io.Reader) (*os.File, int64, error) {
	f, err := os.CreateTemp("", "nymph-relay-reply-*")
	if err != nil {
		return nil, 0, fmt.Errorf("spill file: %w", err)
	}
	os.Remove(f.Name()) // only the descriptor keeps it
	bp := bufPool.Get().(*[]byte)
	n, err := io.CopyBuffer(f, io.LimitReader(r, maxReplyBody+1), *bp)
	bufPool.Put(bp)
	if err == nil && n > maxReplyBody {
		err = errReplyTooLarge
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, n, nil
}

// unwrapURL drops a *url.Error wrapper: its message repeats the URL, and
// the endpoint is already named. Only that one: any other wrapper (the
// upstream timeout's errNoAnswer, which names the deadline) is the
// reason the daemon reads.
func unwrapURL(err error) error {
	if ue, ok := err.(*url.Error); ok && ue.Err != nil {
		return ue.Err
	}
	return err
}

// errReplyHeld says a body is larger than the caller would hold.
var errReplyHeld = errors.New("reply larger than held")

func readLimited(r io.Reader, length int64, limit int) ([]byte, error) {
	if length > int64(limit) {
		return nil, errReplyHeld
	}
	size := 512
	if length >= 0 {
		size = int(length) + 1 // +1 so the EOF read needs no growth
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return buf, errReplyHeld // the bytes read so far come with it
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
