// Package opclient is the HTTP client of `nymph serve`'s operator API (the
// JSON routes in wirecore/operator) and the small pieces `nymph ctl` and
// `nymph dev` build on it: following an exec's streamed output to its end
// and waiting for a worker.
//
// It decides how a request is sent (no redirect is followed, so the admin
// bearer stays with the server URL; an https server is verified at TLS 1.3
// against serve's CA file or the system's roots, never skipped), how an operator error is surfaced, how
// an exec's remote exit code maps to a local one, and that an exec's output
// is handed on byte for byte. It does not decide what a request means (the
// control plane does) nor how anything is printed (cmd/nymph/internal/termtext).
package opclient

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/operator"
)

// maxErrorBody bounds how much of a non-JSON error page is quoted back.
const maxErrorBody = 512

// maxResponseBody bounds a decoded response: a log page or a worker list
// larger than this is a server bug, not something to buffer.
const maxResponseBody = 256 << 20

// Client talks to one control plane's operator API with one admin token.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// New checks baseURL and returns a client. A nil hc uses a client without
// an overall timeout, because log follows are long-polls bounded by the
// context and by wait_s, that verifies an https server against the
// system's roots (NewWithCA names a CA file). No redirect is followed,
// whatever hc says.
func New(baseURL, adminToken string, hc *http.Client) (*Client, error) {
	return build(baseURL, adminToken, hc, "")
}

// NewWithCA is New with nil hc, verifying an https server against the CA
// certificates in caFile only (serve's DATA-DIR/tls/ca.crt); an empty
// caFile trusts the system's roots.
func NewWithCA(baseURL, adminToken, caFile string) (*Client, error) {
	return build(baseURL, adminToken, nil, caFile)
}

func build(baseURL, adminToken string, hc *http.Client, caFile string) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("opclient: parse server URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("opclient: server URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("opclient: server URL %q has no host", baseURL)
	}
	var own http.Client
	if hc != nil {
		own = *hc
	} else {
		cfg, err := tlsca.ClientConfig(caFile)
		if err != nil {
			return nil, fmt.Errorf("opclient: %w", err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg
		own.Transport = tr
	}
	// The admin bearer goes to the server URL only: an operator route never
	// redirects, and Go's default policy would follow one to another port.
	own.CheckRedirect = httpclient.RefuseRedirect
	return &Client{base: u, token: adminToken, http: &own}, nil
}

// Server is the base URL the client talks to.
func (c *Client) Server() string { return c.base.String() }

// ServerCA asks the server for its health and returns the root of the
// chain its certificate was verified through: the CA this client trusts
// it by. A plain http server has none.
func (c *Client) ServerCA(ctx context.Context) (*x509.Certificate, error) {
	if c.base.Scheme != "https" {
		return nil, fmt.Errorf("opclient: %s is plain http: no certificate to verify", c.base.Redacted())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.String()+"/healthz", nil)
	if err != nil {
		return nil, fmt.Errorf("opclient: GET /healthz: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("opclient: GET /healthz: %w", tlsca.Explain(err))
	}
	resp.Body.Close()
	if resp.TLS == nil || len(resp.TLS.VerifiedChains) == 0 {
		return nil, errors.New("opclient: GET /healthz: the connection has no verified chain")
	}
	chain := resp.TLS.VerifiedChains[0]
	return chain[len(chain)-1], nil
}

// APIError is a non-2xx answer of the operator API.
type APIError struct {
	Op     string // e.g. "GET /v1/admin/workers/w1"
	Status int
	// Message is operator.Error.Error, or the start of a non-JSON body.
	Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s: %d %s", e.Op, e.Status, msg)
}

// IsNotFound reports whether err is a 404 from the operator API.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// path fills the {id} segment of an operator route, path-escaped.
func path(route, id string) string {
	return strings.Replace(route, "{id}", url.PathEscape(id), 1)
}

// do sends one request and decodes a JSON answer into out (nil: discard).
func (c *Client) do(ctx context.Context, method, p string, query url.Values, in, out any) error {
	target := c.base.String() + p
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	op := method + " " + p

	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("opclient: %s: encode request: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return fmt.Errorf("opclient: %s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("opclient: %s: %w", op, tlsca.Explain(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return fmt.Errorf("opclient: %s: read response: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		return &APIError{Op: op, Status: resp.StatusCode, Message: errorMessage(data)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("opclient: %s: decode response: %w", op, err)
	}
	return nil
}

// get fetches the route's JSON answer as a T.
func get[T any](ctx context.Context, c *Client, p string, query url.Values) (T, error) {
	var out T
	err := c.do(ctx, http.MethodGet, p, query, nil, &out)
	return out, err
}

// post sends in as the route's JSON body and reads its answer as a T.
func post[T any](ctx context.Context, c *Client, p string, in any) (T, error) {
	var out T
	err := c.do(ctx, http.MethodPost, p, nil, in, &out)
	return out, err
}

// errorMessage extracts operator.Error.Error, else quotes the body's start.
func errorMessage(data []byte) string {
	var e operator.Error
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return e.Error
	}
	s := strings.TrimSpace(string(data))
	if len(s) > maxErrorBody {
		s = s[:maxErrorBody] + "…"
	}
	return s
}

// Workers lists every registered worker.
func (c *Client) Workers(ctx context.Context) ([]operator.Worker, error) {
	return get[[]operator.Worker](ctx, c, operator.PathWorkers, nil)
}

// Worker fetches one worker.
func (c *Client) Worker(ctx context.Context, id string) (operator.Worker, error) {
	return get[operator.Worker](ctx, c, path(operator.PathWorker, id), nil)
}

// Exec queues an exec on a worker.
func (c *Client) Exec(ctx context.Context, worker string, req operator.ExecRequest) (operator.ExecAccepted, error) {
	return post[operator.ExecAccepted](ctx, c, path(operator.PathExec, worker), req)
}

// ExecStatus fetches an exec's state and, once posted, its result.
func (c *Client) ExecStatus(ctx context.Context, execID string) (operator.ExecStatus, error) {
	return get[operator.ExecStatus](ctx, c, path(operator.PathExecStatus, execID), nil)
}

// Logs fetches the exec's streamed output from offset; a positive wait asks
// the server to hold the request until something new arrives.
func (c *Client) Logs(ctx context.Context, execID string, offset int64, wait time.Duration) (operator.LogsPage, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if wait > 0 {
		q.Set("wait_s", strconv.FormatFloat(wait.Seconds(), 'f', -1, 64))
	}
	return get[operator.LogsPage](ctx, c, path(operator.PathExecLogs, execID), q)
}

// Setup appends a setup script to a worker's pending-setup FIFO.
func (c *Client) Setup(ctx context.Context, worker string, req operator.SetupRequest) (operator.CommandAccepted, error) {
	return post[operator.CommandAccepted](ctx, c, path(operator.PathSetup, worker), req)
}

// Hibernate sends a worker to sleep until req.UntilEpochS.
func (c *Client) Hibernate(ctx context.Context, worker string, req operator.HibernateRequest) (operator.CommandAccepted, error) {
	return post[operator.CommandAccepted](ctx, c, path(operator.PathHibernate, worker), req)
}

// Reset queues a reset_backoff for a worker.
func (c *Client) Reset(ctx context.Context, worker string) (operator.CommandAccepted, error) {
	return post[operator.CommandAccepted](ctx, c, path(operator.PathReset, worker), struct{}{})
}

// Update queues an ota_update for a worker.
func (c *Client) Update(ctx context.Context, worker string, req operator.UpdateRequest) (operator.CommandAccepted, error) {
	return post[operator.CommandAccepted](ctx, c, path(operator.PathUpdate, worker), req)
}

// RotateKey queues a rotate_key for a worker.
func (c *Client) RotateKey(ctx context.Context, worker string) (operator.CommandAccepted, error) {
	return post[operator.CommandAccepted](ctx, c, path(operator.PathRotateKey, worker), struct{}{})
}

// Run queues a function invocation.
func (c *Client) Run(ctx context.Context, req operator.RunRequest) (operator.Invocation, error) {
	return post[operator.Invocation](ctx, c, operator.PathInvocations, req)
}

// Invocations lists every invocation.
func (c *Client) Invocations(ctx context.Context) ([]operator.Invocation, error) {
	return get[[]operator.Invocation](ctx, c, operator.PathInvocations, nil)
}

// Invocation fetches one invocation.
func (c *Client) Invocation(ctx context.Context, id string) (operator.Invocation, error) {
	return get[operator.Invocation](ctx, c, path(operator.PathInvocation, id), nil)
}

// Kill asks the control plane to kill an invocation: a queued one at
// once, a running one by a cancel to its daemon (the invocation is still
// running in the answer), or a 409 when its daemon cannot be told.
func (c *Client) Kill(ctx context.Context, id, reason string) (operator.Invocation, error) {
	return post[operator.Invocation](ctx, c, path(operator.PathKill, id), operator.KillRequest{Reason: reason})
}

// KillExec is Kill for an exec.
func (c *Client) KillExec(ctx context.Context, id, reason string) (operator.ExecStatus, error) {
	return post[operator.ExecStatus](ctx, c, path(operator.PathKillExec, id), operator.KillRequest{Reason: reason})
}

// SetConfig sets keys of a worker's live configuration ("" removes one).
func (c *Client) SetConfig(ctx context.Context, worker string, set map[string]string) (operator.Worker, error) {
	return post[operator.Worker](ctx, c, path(operator.PathConfig, worker), operator.ConfigRequest{Set: set})
}
