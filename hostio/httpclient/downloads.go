package httpclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// MaxRelayedDownload is the most a download through a relay can be: the
// frame ceiling (frame.MaxPayload, 256 MiB) less room for the id reply
// that carries the body. A relay answers a larger reply with a
// relay_error, and the daemon holds the whole body in memory.
const MaxRelayedDownload = frame.MaxPayload - 1024

// Downloads fetches the files a control plane points a daemon at — an
// ota_update's binary, a presigned payload — without any credential: no
// bearer and no signature ever goes with them, whatever host the URL
// names. A URL on the control plane's own origin is verified against its
// CA file (a serve with its own CA), any other against the system roots;
// no redirect is followed.
//
// A daemon behind a relay (Through) cannot open a connection at all: it
// fetches a URL on the control plane's origin through the relay instead,
// as docs/protocol.md ("Downloads through a relay") says, and refuses
// any other. The relay's transport carries the daemon's credentials as it
// does for every request; the control plane does not ask for them there.
type Downloads struct {
	own, public *http.Client
	origin      *url.URL
	paths       frame.RelayPaths
	relay       transport.Transport
}

// NewDownloads builds the clients for the control plane at serverURL,
// verified by caFile (empty: the system roots).
func NewDownloads(serverURL, caFile string) (*Downloads, error) {
	origin, err := url.Parse(strings.TrimSpace(serverURL))
	if err != nil {
		return nil, fmt.Errorf("httpclient: parse server url %q: %w", serverURL, err)
	}
	own, err := downloadClient(caFile)
	if err != nil {
		return nil, err
	}
	public, err := downloadClient("")
	if err != nil {
		return nil, err
	}
	return &Downloads{own: own, public: public, origin: origin, paths: frame.NewRelayPaths(origin)}, nil
}

// Through makes d fetch through tr, the transport of a daemon behind a
// relay ([server] transport fifo or spool), and returns d. Call it before
// the first Get.
func (d *Downloads) Through(tr transport.Transport) *Downloads {
	d.relay = tr
	return d
}

// Client is the client for target: the control plane's own for its
// origin, the public one for any other.
func (d *Downloads) Client(target *url.URL) *http.Client {
	if frame.SameOrigin(target, d.origin) {
		return d.own
	}
	return d.public
}

// Get opens rawURL with headers and returns its body and its length (-1
// when the server did not say). Only a 200 is a body; any other status is
// an error naming it and the address. The body yields at most limit
// bytes: past them a read fails, and a length announced over limit is
// refused before a byte is read. ctx bounds the request and the reading
// of the body; the caller closes it.
//
// Directly, it is a GET (Client picks the roots of trust). Through a
// relay, it is a POST of the URL's path with the URL's query in
// wire.HeaderDownloadQuery, which the relay's transport answers whole:
// the body is then in memory, at most MaxRelayedDownload bytes whatever
// limit says, and limit is checked once it has arrived. A URL on another
// origin than the control plane's, or outside its path, is refused then,
// since a relay reaches the control plane only, and so is a header a
// relay does not forward (any but X-LS-*).
func (d *Downloads) Get(ctx context.Context, rawURL string, headers map[string]string, limit int64) (io.ReadCloser, int64, error) {
	target, err := CheckURL("download", rawURL)
	if err != nil {
		return nil, 0, err
	}
	if d.relay != nil {
		return d.getRelayed(ctx, target, headers, limit)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", redacted(target), err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := d.Client(target).Do(req)
	if err != nil {
		// The *url.Error's message repeats the URL, query and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, 0, fmt.Errorf("GET %s: %w", redacted(target), tlsca.Explain(err))
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, 0, fmt.Errorf("GET %s: status %d: %s", redacted(target), resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("GET %s: %d bytes, over the %d-byte limit", redacted(target), resp.ContentLength, limit)
	}
	return &capped{rc: resp.Body, left: limit, limit: limit, what: "GET " + redacted(target)}, resp.ContentLength, nil
}

// getRelayed is Get through the relay's transport.
func (d *Downloads) getRelayed(ctx context.Context, target *url.URL, headers map[string]string, limit int64) (io.ReadCloser, int64, error) {
	endpoint, err := d.paths.Endpoint(target)
	if err != nil {
		return nil, 0, fmt.Errorf("download %s: %w; nothing was sent", redacted(target), err)
	}
	what := "POST " + endpoint + " through the relay (download of " + redacted(target) + ")"
	req := &transport.Request{Endpoint: endpoint, Headers: make(map[string]string, len(headers)+1), Lane: transport.LaneControl}
	for k, v := range headers {
		if !strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Ls-") {
			return nil, 0, fmt.Errorf("%s: header %s would not pass a relay, which forwards X-LS-* headers only; nothing was sent", what, k)
		}
		req.Headers[k] = v
	}
	if target.RawQuery != "" {
		req.Headers[wire.HeaderDownloadQuery] = target.RawQuery
	}
	resp, err := d.relay.RoundTrip(ctx, req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	if resp.Status != http.StatusOK {
		v, refusal := wire.ReadRefusal(resp.Body)
		if !refusal {
			msg := strings.TrimSpace(string(resp.Body[:min(len(resp.Body), 512)]))
			return nil, 0, fmt.Errorf("%s: status %d: %s", what, resp.Status, msg)
		}
		msg := v.Text()
		if v.Error == wire.ErrRelayRefused && resp.Status == http.StatusBadRequest {
			// The relay's own 400 to a download is its allow-list (the
			// daemon routes only) more often than not: say what to change.
			msg += ": a relay that does not forward downloads (docs/protocol.md, \"Downloads through a relay\") admits the daemon routes only"
		}
		return nil, 0, fmt.Errorf("%s: status %d: %s", what, resp.Status, msg)
	}
	if n := int64(len(resp.Body)); n > limit {
		return nil, 0, fmt.Errorf("%s: %d bytes, over the %d-byte limit", what, n, limit)
	}
	return io.NopCloser(bytes.NewReader(resp.Body)), int64(len(resp.Body)), nil
}

// redacted names a download's URL without its query: a presigned URL's
// query is its credential.
func redacted(u *url.URL) string {
	cp := *u
	cp.User = nil
	cp.Fragment, cp.RawFragment = "", ""
	if cp.RawQuery != "" || cp.ForceQuery {
		cp.RawQuery, cp.ForceQuery = "", false
		return cp.String() + "?…"
	}
	return cp.String()
}

// capped is a body that fails a read past limit bytes.
type capped struct {
	rc          io.ReadCloser
	left, limit int64
	what        string
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, c.over()
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1] // one byte more than allowed tells a body over limit
	}
	n, err := c.rc.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n - 1, c.over()
	}
	return n, err
}

func (c *capped) over() error {
	return fmt.Errorf("%s: body over the %d-byte limit", c.what, c.limit)
}

func (c *capped) Close() error { return c.rc.Close() }

// CheckURL reports whether raw is an absolute http(s) URL with a host, the
// only kind Downloads fetches; what names the URL in the error.
func CheckURL(what, raw string) (*url.URL, error) {
	target, err := url.Parse(raw)
	if err != nil || (target.Scheme != "https" && target.Scheme != "http") || target.Host == "" {
		return nil, fmt.Errorf("%s url %q: want http:// or https:// with a host", what, raw)
	}
	return target, nil
}

func downloadClient(caFile string) (*http.Client, error) {
	cfg, err := tlsca.ClientConfig(caFile)
	if err != nil {
		return nil, fmt.Errorf("httpclient: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, CheckRedirect: RefuseRedirect}, nil
}
