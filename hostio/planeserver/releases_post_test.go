package planeserver

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/operator"
)

// A release is downloaded through a relay as a POST with no body, the
// relay's bearer in Authorization: answered as the GET, and a POST with a
// body is refused.
func TestReleaseByPost(t *testing.T) {
	dir := t.TempDir()
	bin := []byte("the binary")
	os.WriteFile(filepath.Join(dir, "nymph-linux-amd64-1.2.0"), bin, 0o644)
	os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Repeat("0", 64)+"  nymph-linux-amd64-1.2.0\n"), 0o644)
	ts := newTestServer(t, nil, func(c *Config) { c.Releases = dir })
	post := func(name, body string) (int, string) {
		req, _ := http.NewRequest("POST", ts.http.URL+strings.Replace(operator.PathRelease, "{name}", name, 1), strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer relay-secret")
		req.Header.Set("Content-Type", "application/x-msgpack")
		st, b := ts.do(req)
		return st, string(b)
	}
	if st, b := post("nymph-linux-amd64-1.2.0", ""); st != 200 || b != string(bin) {
		t.Errorf("POST release: %d %q", st, b)
	}
	if st, _ := post("secret", ""); st != 404 {
		t.Errorf("POST of an unlisted name: %d, want 404", st)
	}
	if st, _ := post("nymph-linux-amd64-1.2.0", "x"); st != 400 {
		t.Errorf("POST with a body: %d, want 400", st)
	}
}
