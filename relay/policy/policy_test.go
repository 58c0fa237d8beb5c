package policy

import (
	"net/url"
	"strings"
	"testing"

	"github.com/nymphd/nymph/hostio/blobstore"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

func TestCheckEndpoint(t *testing.T) {
	long := "/v1/daemon/exec/" + strings.Repeat("a", 500) + "/result"
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"/v1/daemon/hello", true},
		{"/v1/daemon/poll", true},
		{"/v1/daemon/ack", true},
		{"/v1/daemon/keys", true},
		{"/v1/daemon/event", true},
		{"/v1/daemon/result-chunk", true},
		{"/v1/daemon/exec/01HX-abc_1.2/result", true},
		{"/v1/daemon/exec/e1/chunk", true},
		{"/v1/namespaces/team.a/payloads/presign", true},

		{"", false},
		{"v1/daemon/poll", false},
		{"/v1/daemon/poll/", false},
		{"/v1/daemon//poll", false},
		{"/v1/daemon/poll?x=1", false},
		{"/v1/daemon/poll#frag", false},
		{"/v1/daemon/%70oll", false},
		{"/v1/daemon/../admin/workers", false},
		{"/v1/daemon/exec/../result", false},
		{"/v1/daemon/exec/./result", false},
		{"/v1/daemon/exec/a..b/result", false},
		{"/v1/daemon/exec//result", false},
		{"/v1/daemon/exec/e1/stdout", false},
		{"/v1/daemon/exec/e 1/result", false},
		{"/v1/daemon/exec/e1/result/x", false},
		{"/v1/daemon/exec/e1/result/x/y/z", false},
		{"/v1/daemon/poll/x/y/z/w/v/u", false},
		{"/v1/daemon/pollx", false},
		{"/v1/daemon", false},
		{"/v1/admin/workers", false},
		{"/v1/namespaces/ns/payloads", false},
		{"/v1/namespaces/ns/payloads/presign/x", false},
		{"/v2/daemon/poll", false},
		{"/V1/daemon/poll", false},
		{"http://evil/v1/daemon/poll", false},
		{"/v1/daemon/poll\x00", false},
		{"/v1/daemon/exec/e\\1/result", false},
		{long, false},
	} {
		err := CheckEndpoint(tc.endpoint)
		if (err == nil) != tc.ok {
			t.Errorf("CheckEndpoint(%.60q) = %v, want ok=%v", tc.endpoint, err, tc.ok)
		}
	}
}

// The allow-list is wire's list of routes: each one, its parameters filled
// in, passes.
func TestAllowListIsTheWireRoutes(t *testing.T) {
	endpoints := append(wire.DaemonRoutes[:],
		wire.PathExecResult("e-1"), wire.PathExecChunk("e-1"), wire.PathPresign("team.a"),
		wire.BlobPathPrefix+"team.a/k/1", strings.Replace(operator.PathRelease, "{name}", "SHA256SUMS", 1))
	for _, endpoint := range endpoints {
		if err := CheckEndpoint(endpoint); err != nil {
			t.Errorf("CheckEndpoint(%q) = %v", endpoint, err)
		}
	}
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct{ base, endpoint, want string }{
		{"https://cp.example/", "/v1/daemon/poll", "https://cp.example/v1/daemon/poll"},
		{"https://cp.example", "/v1/daemon/poll", "https://cp.example/v1/daemon/poll"},
		{"https://cp.example/api", "/v1/daemon/poll", "https://cp.example/api/v1/daemon/poll"},
		{"https://cp.example/api//", "/v1/daemon/poll", "https://cp.example/api/v1/daemon/poll"},
		{"http://127.0.0.1:8080/a%20b/", "/v1/daemon/ack", "http://127.0.0.1:8080/a%20b/v1/daemon/ack"},
		{"http://127.0.0.1:8080/a%2Fb", "/v1/daemon/ack", "http://127.0.0.1:8080/a%2Fb/v1/daemon/ack"},
	} {
		b, err := ParseBase(tc.base)
		if err != nil {
			t.Fatalf("ParseBase(%q): %v", tc.base, err)
		}
		if got := b.Join(tc.endpoint); got != tc.want {
			t.Errorf("Join(%q, %q) = %q, want %q", tc.base, tc.endpoint, got, tc.want)
		}
		// URL is the same address without a parse.
		u := b.URL(tc.endpoint)
		if got := u.String(); got != tc.want {
			t.Errorf("URL(%q, %q) = %q, want %q", tc.base, tc.endpoint, got, tc.want)
		}
		if parsed, _ := url.Parse(tc.want); u.Path != parsed.Path || u.EscapedPath() != parsed.EscapedPath() {
			t.Errorf("URL(%q, %q): path %q / %q, parsed %q / %q", tc.base, tc.endpoint, u.Path, u.EscapedPath(), parsed.Path, parsed.EscapedPath())
		}
	}
	for _, bad := range []string{"ftp://x/", "https:///nohost", "https://x/?q=1", "https://x/#f", "https://u:p@x/", "://"} {
		if _, err := ParseBase(bad); err == nil {
			t.Errorf("ParseBase(%q) accepted", bad)
		}
	}
}

func TestForwardHeader(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		canon       string
		fwd, err    bool
	}{
		{"X-LS-Signature", "abc", "X-Ls-Signature", true, false},
		{"x-ls-daemon-authorization", "Bearer t", "X-Ls-Daemon-Authorization", true, false},
		{"Authorization", "Bearer evil", "", false, false},
		{"authorization", "Bearer evil", "", false, false},
		{"Host", "evil", "", false, false},
		{"X-Forwarded-For", "1.2.3.4", "", false, false},
		{"X-LS-Sig", "a\r\nAuthorization: x", "", false, true},
		{"X-LS Sig", "a", "", false, true},
		{"", "a", "", false, true},
	} {
		canon, fwd, err := ForwardHeader(tc.name, tc.value)
		if canon != tc.canon || fwd != tc.fwd || (err != nil) != tc.err {
			t.Errorf("ForwardHeader(%q, %q) = %q, %v, %v", tc.name, tc.value, canon, fwd, err)
		}
	}
	if ValidContentType("text/plain\r\nX: y") || !ValidContentType("text/plain; charset=utf-8") {
		t.Error("ValidContentType")
	}
}

// The two download routes **(nymph)**: a blob's path, its namespace and
// key segments as the blob store allows them and at most
// wire.MaxRelayedBlobKeySegments of key, and a release's; and their near
// misses.
func TestCheckEndpointDownloads(t *testing.T) {
	key := func(n int) string { return strings.TrimSuffix(strings.Repeat("k/", n), "/") }
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"/v1/blobs/default/sha256-" + strings.Repeat("ab", 32), true},
		{"/v1/blobs/team.a/job-1/args/0123abcd", true},
		{"/v1/blobs/ns/a_b-C.9", true},
		{"/v1/blobs/ns/" + key(wire.MaxRelayedBlobKeySegments), true},
		{"/v1/releases/nymph-linux-amd64-0.1.0-ota", true},
		{"/v1/releases/SHA256SUMS", true},

		{"/v1/blobs/ns/" + key(wire.MaxRelayedBlobKeySegments+1), false},
		{"/v1/blobs/ns/" + key(40), false},
		{"/v1/blobs/ns", false},
		{"/v1/blobs/ns/", false},
		{"/v1/blobs", false},
		{"/v1/blobs/", false},
		{"/v1/blobs/ns/k?exp=1&size=0&sig=ab", false},
		{"/v1/blobs/ns/k#f", false},
		{"/v1/blobs/ns/../admin/workers", false},
		{"/v1/blobs/../admin/k", false},
		{"/v1/blobs/ns/./k", false},
		{"/v1/blobs/ns/a//k", false},
		{"/v1/blobs/ns/a%2Fk", false},
		{"/v1/blobs/.incoming/x", false},
		{"/v1/blobs/ns/.incoming", false},
		{"/v1/blobs/ns/a/.hidden", false},
		{"/v1/blobs/ns/a b", false},
		{"/v1/blob/ns/k", false},
		{"/v1/releases", false},
		{"/v1/releases/", false},
		{"/v1/releases/a/b", false},
		{"/v1/releases/..", false},
		{"/v1/releases/x?y=1", false},
		{"/v1/releases/nymph%2F..", false},
	} {
		err := CheckEndpoint(tc.endpoint)
		if (err == nil) != tc.ok {
			t.Errorf("CheckEndpoint(%.80q) = %v, want ok=%v", tc.endpoint, err, tc.ok)
		}
	}
}

// A segment the relay admits in a blob's path is one the blob store
// accepts as a namespace, so the relay forwards nothing serve would call
// a bad path and refuses nothing it would serve.
func TestBlobSegmentsAreTheStoresRule(t *testing.T) {
	for _, s := range []string{"a", "A-9", "team.a", "x_y", ".x", ".", "..", "a.", "a b", "é", "a+b", "-", "_"} {
		want := blobstore.ValidNamespace(s) && blobstore.ValidKey(s)
		got := CheckEndpoint("/v1/blobs/"+s+"/k") == nil && CheckEndpoint("/v1/blobs/ns/k/"+s) == nil
		if got != want {
			t.Errorf("segment %q: relay admits %v, the store %v", s, got, want)
		}
	}
}
