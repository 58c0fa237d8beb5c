package policy

import (
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// FuzzCheckEndpoint: whatever a frame names, an endpoint the policy lets
// upstream is a clean absolute path within MaxEndpoint bytes — no query,
// fragment, escape, "..", "//" or trailing slash — and nothing panics.
func FuzzCheckEndpoint(f *testing.F) {
	for _, s := range []string{wire.PathPoll, wire.PathExecResult("x1"), wire.PathPresign("default"),
		"/v1/blobs/default/sha256-ab/cd", "/v1/releases/nymph-linux-amd64-1.0", "/v1/blobs/../x", "/v1/daemon/poll?x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, endpoint string) {
		if CheckEndpoint(endpoint) != nil {
			return
		}
		switch {
		case len(endpoint) > MaxEndpoint, !strings.HasPrefix(endpoint, "/"),
			strings.ContainsAny(endpoint, "?#%"), strings.Contains(endpoint, ".."),
			strings.Contains(endpoint, "//"), strings.HasSuffix(endpoint, "/"):
			t.Fatalf("let through %q", endpoint)
		}
	})
}
