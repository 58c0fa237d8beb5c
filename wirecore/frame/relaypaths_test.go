package frame

import (
	"net/url"
	"strings"
	"testing"
)

// A URL on the plane's origin, under its path, is the rest of its path;
// any other has none, and the reason names the plane, never the URL.
func TestRelayPathsEndpoint(t *testing.T) {
	for _, tc := range []struct {
		plane, target string
		endpoint      string
		refusal       string
	}{
		{plane: "https://plane.example:8443/nymph", target: "https://plane.example:8443/nymph/v1/daemon/exec/x/chunk", endpoint: "/v1/daemon/exec/x/chunk"},
		{plane: "https://plane.example:8443/nymph/", target: "https://plane.example:8443/nymph/v1/poll", endpoint: "/v1/poll"},
		{plane: "https://Plane.Example:8443/nymph", target: "HTTPS://plane.example:8443/nymph/v1/poll", endpoint: "/v1/poll"},
		{plane: "https://plane", target: "https://plane:443/v1/blobs/ns/k", endpoint: "/v1/blobs/ns/k"},
		{plane: "http://127.0.0.1/", target: "http://127.0.0.1:80/v1/releases/r", endpoint: "/v1/releases/r"},
		// The path goes as escaped; the query and fragment are the caller's.
		{plane: "https://plane", target: "https://plane/v1/blobs/ns/a%2Fb?sig=x#f", endpoint: "/v1/blobs/ns/a%2Fb"},

		{plane: "https://plane.example:8443", target: "https://sink.example/v1/poll", refusal: "not on the control plane's origin https://plane.example:8443 ([server] url)"},
		{plane: "HTTPS://plane.example:8443", target: "http://plane.example:8443/v1/poll", refusal: "not on the control plane's origin https://plane.example:8443 ("},
		{plane: "https://plane.example:8443", target: "https://plane.example/v1/poll", refusal: "not on the control plane's origin"},
		{plane: "https://plane/nymph", target: "https://plane/nymphs/v1/poll", refusal: `outside the control plane's path "/nymph/" ([server] url)`},
		{plane: "https://plane/nymph", target: "https://plane/nymph", refusal: `outside the control plane's path "/nymph/"`},
		{plane: "https://plane", target: "https://plane", refusal: `outside the control plane's path "/"`},
	} {
		plane, err := url.Parse(tc.plane)
		if err != nil {
			t.Fatal(err)
		}
		target, err := url.Parse(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewRelayPaths(plane).Endpoint(target)
		if tc.refusal != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refusal) || strings.Contains(err.Error(), tc.target) {
				t.Errorf("%s under %s: %q, %v; want a refusal saying %q", tc.target, tc.plane, got, err, tc.refusal)
			}
			continue
		}
		if err != nil || got != tc.endpoint {
			t.Errorf("%s under %s: %q, %v; want %q", tc.target, tc.plane, got, err, tc.endpoint)
		}
	}
}

// One origin is one scheme, host and port, however they are spelled.
func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"https://cp.example", "https://cp.example/v1/daemon/exec/x/chunk", true},
		{"https://cp.example", "https://cp.example:443/v1/x", true},
		{"https://cp.example:443", "https://cp.example/v1/x", true},
		{"https://cp.example", "https://CP.example./v1/x", true},
		{"http://cp.example", "http://cp.example:80/v1/x", true},
		{"HTTPS://cp.example", "https://cp.example/v1/x", true},
		{"https://[::1]:8443", "https://[::1]:8443/v1/x", true},
		{"https://cp.example", "http://cp.example/v1/x", false},
		{"https://cp.example", "https://cp.example:8443/v1/x", false},
		{"http://cp.example", "http://cp.example:443/v1/x", false},
		{"https://cp.example", "https://cp.example.evil/v1/x", false},
		{"https://cp.example", "https://evil.cp.example/v1/x", false},
		{"https://cp.example", "https://cp.example../v1/x", false},
	} {
		a, _ := url.Parse(tc.a)
		b, _ := url.Parse(tc.b)
		if got := SameOrigin(a, b); got != tc.same {
			t.Errorf("SameOrigin(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
		if got := SameOrigin(b, a); got != tc.same {
			t.Errorf("SameOrigin(%s, %s) = %v, want %v", tc.b, tc.a, got, tc.same)
		}
	}
}
