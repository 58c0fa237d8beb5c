package daemonloop

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// ThroughRelay wraps a relay transport (fifo, spool) for what a relay can
// carry. A relay envelope names an endpoint path, which the relay joins to
// its one upstream, so an absolute URL handed out by the control plane (a
// log sink's stdout_url) must be turned back into a path. That is only
// right for a URL on the control plane's own origin, which is planeURL
// (the daemon's [server] url): the path is what follows planeURL's path.
// Any other URL is refused with an error naming both origins, rather than
// sent to the control plane, bearer and all, in place of the host it names.
// When token is not empty, every request carries the daemon's bootstrap
// bearer in wire.HeaderDaemonAuthorization.
func ThroughRelay(t transport.Transport, planeURL, token string) (transport.Transport, error) {
	base, err := url.Parse(strings.TrimSpace(planeURL))
	if err != nil {
		return nil, fmt.Errorf("daemonloop: [server] url %q: %w", planeURL, err)
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("daemonloop: [server] url %q: want http:// or https:// with a host (through a relay it names the control plane, whose log-sink URLs are mapped to relay endpoints)", planeURL)
	}
	r := relayed{t: t, plane: base, paths: frame.NewRelayPaths(base)}
	if token != "" {
		r.bearer = "Bearer " + token
	}
	return r, nil
}

type relayed struct {
	t      transport.Transport
	plane  *url.URL
	paths  frame.RelayPaths
	bearer string
}

func (r relayed) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	cp := *req
	if isURL(req.Endpoint) {
		path, err := r.endpointOf(req.Endpoint)
		if err != nil {
			return nil, err
		}
		cp.Endpoint = path
	}
	if r.bearer != "" {
		cp.Headers = make(map[string]string, len(req.Headers)+1)
		for k, v := range req.Headers {
			cp.Headers[k] = v
		}
		cp.Headers[wire.HeaderDaemonAuthorization] = r.bearer
	}
	return r.t.RoundTrip(ctx, &cp)
}

// CanWithdraw is the relay carrier's answer, false for fifo and spool.
func (r relayed) CanWithdraw() bool { return r.t.CanWithdraw() }

// isURL reports whether an endpoint names a host rather than being a path.
func isURL(endpoint string) bool {
	return strings.Contains(endpoint, "://") || strings.HasPrefix(endpoint, "//")
}

// endpointOf maps a URL on the control plane's origin, under its path, to
// the endpoint path a relay envelope carries (frame.RelayPaths). A
// relay forwards a path only, so a URL with a query or fragment is refused
// rather than sent without them, somewhere else.
func (r relayed) endpointOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("daemonloop: through a relay: URL %q: %w", raw, err)
	}
	if u.Scheme == "" { // scheme-relative: the control plane's scheme
		u.Scheme = r.plane.Scheme
	}
	// A URL off the origin is refused as that, naming both origins, even
	// with a query: the origin is what tells a user where it went wrong.
	path, err := r.paths.Endpoint(u)
	if err != nil {
		return "", fmt.Errorf("daemonloop: through a relay: %s is %w; nothing was sent", u.Redacted(), err)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("daemonloop: through a relay: %s: a relay endpoint carries no query or fragment; nothing was sent", u.Redacted())
	}
	return path, nil
}
