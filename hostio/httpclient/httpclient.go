// Package httpclient is the direct transport: each transport.Request becomes
// one HTTP POST to the control plane (docs/protocol.md, "Transport").
//
// It decides the headers (msgpack both ways, octet-stream for raw log
// chunks, the bootstrap bearer), the timeouts of the HTTP client, how an
// endpoint is joined to the base URL, and that the bearer only ever goes to
// the control plane's own origin: no redirect is followed, by this client or
// by the operator's (RefuseRedirect), because a control-plane route never
// redirects and Go's default policy would carry the bearer to another port
// or scheme of the same host. An https server is verified against the CA
// file it is given (serve's DATA-DIR/tls/ca.crt) or the system's roots, at
// TLS 1.3 (hostio/tlsca); verification is never skipped. It does not
// decide what a status means:
// a non-2xx answer comes back as a Response for the caller to judge with
// transport.Check.
package httpclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Timeouts of protocol "1".
const (
	RequestTimeout  = 120 * time.Second
	IdleConnTimeout = 90 * time.Second
)

// maxResponseBytes bounds what one answer may hold; the largest legitimate
// reply (a poll full of commands) is far below it.
const maxResponseBytes = 256 << 20

// Options configure a Client.
type Options struct {
	// BaseURL is [server] url, e.g. "https://plane.example:8443" or
	// "http://127.0.0.1:8383/prefix".
	BaseURL string
	// Token is the bootstrap bearer, already read (secretfile.ReadToken);
	// empty sends no Authorization header.
	Token string
	// CAFile holds the CA certificates an https server must be signed by
	// ([server] ca_file: serve's DATA-DIR/tls/ca.crt); empty trusts the
	// system's roots.
	CAFile string
	// TLS, when set, replaces the configuration CAFile makes (a join's
	// tlsca.Pinned). It must verify the server.
	TLS *tls.Config
	// HTTPClient replaces the default client (tests); its Timeout is kept,
	// its redirect policy replaced by RefuseRedirect. CAFile and TLS are
	// then not used.
	HTTPClient *http.Client
	Log        *slog.Logger
}

// Client implements transport.Transport over HTTP.
type Client struct {
	base   *url.URL
	token  string
	client *http.Client
}

var _ transport.Transport = (*Client)(nil)

// New validates the base URL and builds the client. A plain http:// URL to
// a host that is not loopback is allowed (tests, private networks) but
// warned about once, here.
func New(opts Options) (*Client, error) {
	base, err := url.Parse(strings.TrimSpace(opts.BaseURL))
	if err != nil {
		return nil, fmt.Errorf("httpclient: parse server url %q: %w", opts.BaseURL, err)
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("httpclient: server url %q: want http:// or https:// with a host", opts.BaseURL)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if base.Scheme == "http" && !IsLoopbackHost(base.Hostname()) {
		log.Warn("server url is plain http to a non-loopback host; the bearer travels unencrypted", "url", base.Redacted())
	}
	var hc http.Client
	if opts.HTTPClient != nil {
		hc = *opts.HTTPClient
	} else {
		tlsCfg := opts.TLS
		if tlsCfg == nil {
			if tlsCfg, err = tlsca.ClientConfig(opts.CAFile); err != nil {
				return nil, fmt.Errorf("httpclient: %w", err)
			}
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsCfg
		tr.IdleConnTimeout = IdleConnTimeout
		tr.MaxIdleConnsPerHost = 16
		hc = http.Client{Transport: tr, Timeout: RequestTimeout}
	}
	hc.CheckRedirect = RefuseRedirect
	return &Client{base: base, token: opts.Token, client: &hc}, nil
}

// ErrRedirect marks a redirect answer that was not followed.
var ErrRedirect = errors.New("redirects are not followed")

// retryAfter reads a Retry-After of whole seconds (the form nymph serve
// and most planes send); a date or garbage is 0.
func retryAfter(v string) time.Duration {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
	if err != nil {
		return 0
	}
	return time.Duration(n) * time.Second
}

// RefuseRedirect is an http.Client CheckRedirect that follows no redirect,
// with an error naming the status and the Location, so an operator can
// point the URL at the address that actually answers. Go's default policy
// would send the bearer along to the same host on another port or scheme.
func RefuseRedirect(req *http.Request, via []*http.Request) error {
	from, status := "the server", 0
	if len(via) > 0 {
		from = via[len(via)-1].URL.Redacted()
	}
	if req.Response != nil {
		status = req.Response.StatusCode
	}
	return fmt.Errorf("%s answered %d with Location %s: %w (set the server URL to the address that answers)", from, status, req.URL.Redacted(), ErrRedirect)
}

// IsLoopbackHost reports whether host names this machine: "localhost" or a
// loopback IP.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URL resolves an endpoint: a full http(s) URL is used as is; a path is
// joined to the base URL with exactly one slash between them.
func (c *Client) URL(endpoint string) (*url.URL, error) {
	if strings.HasPrefix(endpoint, "http://") || strings.HasPrefix(endpoint, "https://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("httpclient: parse endpoint %q: %w", endpoint, err)
		}
		return u, nil
	}
	u := *c.base
	u.Path = strings.TrimRight(c.base.Path, "/") + "/" + strings.TrimLeft(endpoint, "/")
	u.RawPath = ""
	u.RawQuery = c.base.RawQuery
	return &u, nil
}

// RoundTrip posts one request. A response of any status is returned as a
// Response; an error means no response arrived.
func (c *Client) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	u, err := c.URL(req.Endpoint)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(req.Body))
	if err != nil {
		return nil, fmt.Errorf("httpclient: POST %s: %w", req.Endpoint, err)
	}
	ct := req.ContentType
	if ct == "" {
		ct = wire.ContentTypeMsgpack
	}
	hreq.Header.Set("Content-Type", ct)
	hreq.Header.Set("Accept", wire.ContentTypeMsgpack)
	for k, v := range req.Headers {
		// Only the signature headers may be added; the bearer is ours to set.
		if strings.EqualFold(k, "Authorization") {
			continue
		}
		hreq.Header.Set(k, v)
	}
	if c.token != "" && frame.SameOrigin(u, c.base) { // the only place the bearer may go
		hreq.Header.Set("Authorization", "Bearer "+c.token)
	}
	hresp, err := c.client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("httpclient: POST %s: %w", req.Endpoint, tlsca.Explain(err))
	}
	defer hresp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("httpclient: POST %s: read body: %w", req.Endpoint, err)
	}
	if len(body) > maxResponseBytes {
		return nil, fmt.Errorf("httpclient: POST %s: %w", req.Endpoint, errTooLarge)
	}
	return &transport.Response{Status: hresp.StatusCode, ContentType: hresp.Header.Get("Content-Type"), Body: body,
		RetryAfter: retryAfter(hresp.Header.Get("Retry-After"))}, nil
}

var errTooLarge = errors.New("response larger than 256 MiB")

// CanWithdraw implements transport.Transport: a cancelled request's
// connection is closed, which ends the request at the control plane.
func (*Client) CanWithdraw() bool { return true }

// CloseIdle drops pooled connections (at exit, so nothing lingers).
func (c *Client) CloseIdle() { c.client.CloseIdleConnections() }
