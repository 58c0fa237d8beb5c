// Package policy decides what a relay lets through to the control plane:
// which endpoints a frame may name, which envelope headers it forwards, and
// how an endpoint is joined to the upstream base URL. Which request ids it
// accepts is the envelope format's rule, frame.ValidID.
//
// It does not decide how frames are read or how the upstream is called; it is
// pure string checking so that every rule can be tested by table.
package policy

import (
	"errors"
	"fmt"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// MaxEndpoint is the longest endpoint a frame may name.
const MaxEndpoint = 512

// routes is the allow-list: the daemon routes of protocol "1"
// (docs/protocol.md, "Endpoints"), the fixed ones and the three with a
// parameter, and the two a relayed daemon downloads from **(nymph)**
// (docs/protocol.md, "Downloads through a relay"): a presigned payload
// URL's path and a release's, split into segments.
var routes = splitRoutes(slices.Concat(wire.DaemonRoutes[:],
	[]string{wire.PatternExecResult, wire.PatternExecChunk, wire.PatternPresign,
		wire.PatternBlob, operator.PathRelease}))

// maxSegments is the most segments an endpoint may have: a blob's path,
// "v1", "blobs", its namespace and up to wire.MaxRelayedBlobKeySegments
// segments of key. An endpoint with more is refused without being split
// further.
const maxSegments = 3 + wire.MaxRelayedBlobKeySegments

// segment is one segment of a route: a literal, or a path parameter (an
// exec id, a namespace), which validName checks. A rest parameter (the
// last, "{key...}") stands for one to wire.MaxRelayedBlobKeySegments
// segments. The segments of a blob's path follow the blob store's rule
// as well: none starts with a dot.
type segment struct {
	literal string
	param   bool
	rest    bool
	blob    bool
}

// splitRoutes splits each route at "/"; a segment in braces ("{exec_id}",
// as the ServeMux patterns write them) is a parameter, one ending in
// "...}" a rest parameter.
func splitRoutes(paths []string) [][]segment {
	out := make([][]segment, 0, len(paths))
	for _, p := range paths {
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		blob := strings.HasPrefix(p, wire.BlobPathPrefix)
		route := make([]segment, len(parts))
		for i, part := range parts {
			param := strings.HasPrefix(part, "{") && strings.HasSuffix(part, "}")
			rest := param && strings.HasSuffix(part, "...}")
			if rest && i != len(parts)-1 {
				panic(fmt.Sprintf("policy: route %s has a rest parameter before its end", p))
			}
			route[i] = segment{literal: part, param: param, rest: rest, blob: blob}
		}
		if longest(route) > maxSegments {
			panic(fmt.Sprintf("policy: route %s has more than %d segments", p, maxSegments))
		}
		out = append(out, route)
	}
	return out
}

// longest is the most segments an endpoint of route has.
func longest(route []segment) int {
	if n := len(route); n > 0 && route[n-1].rest {
		return n - 1 + wire.MaxRelayedBlobKeySegments
	}
	return len(route)
}

// CheckEndpoint returns nil when endpoint is on the allow-list and clean:
// an absolute path, no query, no percent-escapes, no "." or ".." segment, no
// "//", no trailing slash, at most MaxEndpoint bytes.
func CheckEndpoint(endpoint string) error {
	if err := checkClean(endpoint); err != nil {
		return fmt.Errorf("endpoint %.80q: %w", endpoint, err)
	}
	var buf [maxSegments + 1]string // one more: a longer endpoint matches nothing
	seg := splitInto(buf[:0], endpoint[1:])
	if allowed(seg) {
		return nil
	}
	return fmt.Errorf("endpoint %.80q: not on the allow-list", endpoint)
}

func checkClean(endpoint string) error {
	switch {
	case endpoint == "":
		return errors.New("empty")
	case len(endpoint) > MaxEndpoint:
		return fmt.Errorf("longer than %d bytes", MaxEndpoint)
	case endpoint[0] != '/':
		return errors.New("not an absolute path")
	case strings.ContainsAny(endpoint, "?#%"):
		return errors.New("query, fragment or percent-escape")
	case strings.Contains(endpoint, "//"):
		return errors.New(`contains "//"`)
	case strings.Contains(endpoint, ".."):
		return errors.New(`contains ".."`)
	case strings.HasSuffix(endpoint, "/"):
		return errors.New("trailing slash")
	}
	return nil
}

// splitInto appends the "/"-separated segments of s to dst, stopping one
// past cap(dst) (more segments than any route has); it does not allocate.
func splitInto(dst []string, s string) []string {
	for len(dst) < cap(dst) {
		head, rest, more := strings.Cut(s, "/")
		dst = append(dst, head)
		if !more {
			return dst
		}
		s = rest
	}
	return dst
}

func allowed(seg []string) bool {
	for _, route := range routes {
		if matches(route, seg) {
			return true
		}
	}
	return false
}

func matches(route []segment, seg []string) bool {
	n := len(route)
	if n == 0 || len(seg) < n || len(seg) > longest(route) || len(seg) > n && !route[n-1].rest {
		return false
	}
	for i, s := range seg {
		want := route[min(i, n-1)]
		switch {
		case !want.param:
			if s != want.literal {
				return false
			}
		case !validName(s), want.blob && s[0] == '.':
			return false
		}
	}
	return true
}

// validName reports whether s is a path parameter (an exec id or a
// namespace): [A-Za-z0-9._-]+, and not "." (a segment a server would
// normalise away).
func validName(s string) bool {
	if s == "" || s == "." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ForwardHeader returns the canonical name of an envelope header the relay
// forwards upstream, and false for every other header. Only X-LS-* headers
// pass; Authorization never does, whatever its spelling, because that header
// carries the relay's own token. A name or value that is not valid HTTP is an
// error: the frame is refused rather than silently changed.
func ForwardHeader(name, value string) (string, bool, error) {
	if !validHeaderName(name) || !validHeaderValue(value) {
		return "", false, fmt.Errorf("header %.80q: not a valid HTTP header", name)
	}
	canon := textproto.CanonicalMIMEHeaderKey(name)
	if !strings.HasPrefix(canon, "X-Ls-") {
		return "", false, nil
	}
	return canon, true, nil
}

// ValidContentType reports whether an envelope's content_type can be sent
// as a header value.
func ValidContentType(ct string) bool {
	return len(ct) <= 256 && validHeaderValue(ct)
}

// Base is a parsed upstream base URL ready to have endpoints joined to it.
type Base struct {
	prefix string // scheme://host/path without a trailing slash
	// The same, parsed: path is unescaped, rawPath is set only when the
	// base path needed escaping (as in url.URL).
	scheme, host, path, rawPath string
}

// ParseBase checks an upstream URL: http or https, a host, no query, no
// fragment, no user info (the relay's credential is its token file).
func ParseBase(raw string) (Base, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Base{}, fmt.Errorf("upstream %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return Base{}, fmt.Errorf("upstream %q: scheme must be http or https", raw)
	case u.Host == "":
		return Base{}, fmt.Errorf("upstream %q: no host", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return Base{}, fmt.Errorf("upstream %q: a query or fragment cannot prefix an endpoint", raw)
	case u.User != nil:
		return Base{}, fmt.Errorf("upstream %q: user info is not allowed; use the token file", raw)
	}
	b := Base{prefix: u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"),
		scheme: u.Scheme, host: u.Host, path: strings.TrimRight(u.Path, "/")}
	if u.RawPath != "" {
		b.rawPath = strings.TrimRight(u.RawPath, "/")
	}
	return b, nil
}

// URL is Join as a *url.URL, built without parsing (the relay makes one
// per frame). endpoint must have passed CheckEndpoint: its bytes need no
// escaping, so it is the same in Path and RawPath.
func (b Base) URL(endpoint string) *url.URL {
	endpoint = "/" + strings.TrimLeft(endpoint, "/")
	u := &url.URL{Scheme: b.scheme, Host: b.host, Path: b.path + endpoint}
	if b.rawPath != "" {
		u.RawPath = b.rawPath + endpoint
	}
	return u
}

// Join returns the URL of endpoint under the base, with exactly one slash
// between them. endpoint must already have passed CheckEndpoint (so it
// starts with one slash and needs no escaping).
func (b Base) Join(endpoint string) string {
	return b.prefix + "/" + strings.TrimLeft(endpoint, "/")
}

// String returns the base URL without a trailing slash.
func (b Base) String() string { return b.prefix }

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validHeaderValue refuses control characters other than tab, so that no
// value can split a header line.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
