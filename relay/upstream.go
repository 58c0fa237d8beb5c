package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/hostio/inlinehttp"
	"github.com/nymphd/nymph/relay/policy"
)

// maxReply bounds the upstream reply the relay holds to frame it; daemon
// routes answer in kilobytes, so this only stops a runaway upstream.
const maxReply = 16 << 20

// defaultContentType is what the daemon's bodies are unless the envelope
// says otherwise (raw log chunks).
const defaultContentType = "application/x-msgpack"

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

// defaultContentTypeHeader is shared by every request, as auth is.
var defaultContentTypeHeader = []string{defaultContentType}

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
// flight under a connection's stream limit (transportPool).
func defaultTransport(base policy.Base, maxConns int, proxy func(*http.Request) (*url.URL, error)) http.RoundTripper {
	u := base.URL("/")
	if u.Scheme == "http" {
		if via, err := proxy(&http.Request{URL: u}); err == nil && via == nil {
			return inlinehttp.New(inlinehttp.Options{MaxConns: maxConns})
		}
	}
	return newTransportPool(maxConns, newTransport)
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
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
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
type result struct {
	status int
	body   []byte
	err    error
}

// post sends one request and reads the whole reply (up to maxReply). It
// never retries: the relay is a byte-mover and the daemon owns retries.
// ctx carries the upstream timeout; the caller sets it.
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
		Header: make(http.Header, len(rq.headers)+2), Body: body, ContentLength: rq.bodyLen,
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
	req.Header["Authorization"] = u.authorization()
	resp, err := u.transport.RoundTrip(req)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx) // why the relay cancelled it, not just "canceled"
	}
	if err != nil {
		return result{err: fmt.Errorf("relay: POST %s: %w", rq.endpoint, unwrapURL(err))}
	}
	defer resp.Body.Close()
	data, err := readLimited(resp.Body, resp.ContentLength, maxReply)
	if err != nil {
		return result{err: fmt.Errorf("relay: POST %s: read reply: %w", rq.endpoint, err)}
	}
	return result{status: resp.StatusCode, body: data}
}

// unwrapURL drops the *url.Error wrapper: its message repeats the URL, and
// the endpoint is already named.
func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

var errReplyTooLarge = fmt.Errorf("reply over %d bytes", maxReply)

func readLimited(r io.Reader, length int64, limit int) ([]byte, error) {
	if length > int64(limit) {
		return nil, errReplyTooLarge
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
			return nil, errReplyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
