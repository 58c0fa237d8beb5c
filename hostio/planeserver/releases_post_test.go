package planeserver

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// DownloadByPost hands get a GET, so a conditional header means what it
// means for a GET (a 304 here, where a POST would get the body), leaves
// the caller's request a POST, and refuses a POST with a body.
func TestDownloadByPostIsAGet(t *testing.T) {
	modified := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	var method string
	h := DownloadByPost(func(w http.ResponseWriter, r *http.Request) {
		method = r.Method
		http.ServeContent(w, r, "", modified, strings.NewReader("the bytes"))
	})

	req := httptest.NewRequest(http.MethodPost, "/v1/releases/x", nil)
	w := httptest.NewRecorder()
	h(w, req)
	if w.Code != http.StatusOK || w.Body.String() != "the bytes" || method != http.MethodGet || req.Method != http.MethodPost {
		t.Errorf("POST: %d %q, handler saw %s, caller's request now %s", w.Code, w.Body, method, req.Method)
	}

	req = httptest.NewRequest(http.MethodPost, "/v1/releases/x", nil)
	req.Header.Set("If-Modified-Since", modified.Format(http.TimeFormat))
	w = httptest.NewRecorder()
	h(w, req)
	if w.Code != http.StatusNotModified {
		t.Errorf("POST with If-Modified-Since: %d, want the GET's 304", w.Code)
	}

	for _, length := range []int64{1, -1} {
		method = ""
		req = httptest.NewRequest(http.MethodPost, "/v1/releases/x", strings.NewReader("x"))
		req.ContentLength = length
		w = httptest.NewRecorder()
		h(w, req)
		if w.Code != http.StatusBadRequest || method != "" {
			t.Errorf("POST with a body of length %d: %d, handler called: %v", length, w.Code, method != "")
		}
	}
}
