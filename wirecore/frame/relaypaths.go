package frame

import (
	"fmt"
	"net/url"
	"strings"
)

// RelayPaths turns a URL the control plane handed out (a log sink's
// stdout_url, a presigned payload URL, an ota_update's url) into the
// endpoint path a relay envelope carries. A relay joins that path to its
// one upstream, the control plane at [server] url, so a URL on the
// control plane's origin, under [server] url's path, travels as the rest
// of its path (docs/protocol.md, "Where a chunk goes" and "Downloads
// through a relay"). Any other URL has no endpoint: sent, it would reach
// the control plane, with the daemon's credentials, in place of the host
// it names. Both relayed paths, downloads (httpclient.Downloads.Through)
// and the daemon's own requests (daemonloop.ThroughRelay), map URLs with
// it.
type RelayPaths struct {
	plane *url.URL
	// prefix is plane's path without its trailing slash: a URL under it
	// is prefix + the endpoint a relay is given.
	prefix string
}

// NewRelayPaths maps URLs for the control plane at plane ([server] url).
func NewRelayPaths(plane *url.URL) RelayPaths {
	return RelayPaths{plane: plane, prefix: strings.TrimRight(plane.EscapedPath(), "/")}
}

// Endpoint returns target's endpoint path, or why it has none. The
// reason does not name target, which the caller names as it may be shown
// (a presigned URL's query is its credential); it reads after that name
// ("URL is …", "URL: …"). target's query and fragment are not looked at:
// whether it may have them is the caller's rule.
func (p RelayPaths) Endpoint(target *url.URL) (string, error) {
	if !SameOrigin(target, p.plane) {
		return "", fmt.Errorf("not on the control plane's origin %s://%s ([server] url), and a relay carries requests to the control plane only",
			strings.ToLower(p.plane.Scheme), p.plane.Host)
	}
	path := target.EscapedPath()
	if !strings.HasPrefix(path, p.prefix+"/") {
		return "", fmt.Errorf("outside the control plane's path %q ([server] url)", p.prefix+"/")
	}
	return path[len(p.prefix):], nil
}

// SameOrigin reports whether a and b have one origin: scheme, host and
// port, an absent port being the scheme's default and a host's case and
// final dot not counting. It is the one test of where a daemon's
// credentials (and its relay) may go.
func SameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(hostOf(a), hostOf(b)) &&
		portOf(a) == portOf(b)
}

// hostOf is u's host without the final dot of a fully qualified name.
func hostOf(u *url.URL) string { return strings.TrimSuffix(u.Hostname(), ".") }

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}
