package blobstore

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/wirecore/wire"
)

// serve mounts the handler on the prefix wire names.
func TestBlobPrefixIsWires(t *testing.T) {
	if planeserver.BlobPathPrefix != wire.BlobPathPrefix {
		t.Fatalf("planeserver mounts blobs on %q, wire names %q", planeserver.BlobPathPrefix, wire.BlobPathPrefix)
	}
}

// postDownload is a download through a relay: a POST of the URL's path,
// its query in wire.HeaderDownloadQuery (when not empty), and body.
func postDownload(t *testing.T, rawURL, query string, body io.Reader, length int64) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	if query != "" {
		req.Header.Set(wire.HeaderDownloadQuery, query)
	}
	// What a relay adds: its own bearer and the envelope's content type.
	req.Header.Set("Authorization", "Bearer relay-secret")
	req.Header.Set("Content-Type", "application/x-msgpack")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// splitURL is a presigned URL's address without its query, and the query.
func splitURL(t *testing.T, raw string) (string, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.RawQuery
	u.RawQuery = ""
	return u.String(), q
}

// A POST with no body and the get URL's query in X-LS-Download-Query is
// that GET; the signature is checked exactly as in the URL.
func TestDownloadByPost(t *testing.T) {
	f := newFixture(t)
	data := strings.Repeat("blob bytes ", 1000)
	f.store(t, "dir/seed", data)
	get := f.mustPresign(t, "get", "dir/seed", int64(len(data)))
	put := f.mustPresign(t, "put", "other", 3)
	addr, query := splitURL(t, get.URL)
	_, putQuery := splitURL(t, put.URL)
	putAddr := strings.Replace(addr, "/dir/seed", "/other", 1)

	if st, body := postDownload(t, addr, query, nil, 0); st != 200 || string(body) != data {
		t.Fatalf("POST download = %d, %d bytes; want 200 and the blob", st, len(body))
	}
	tampered := func(k, v string) string {
		q, _ := url.ParseQuery(query)
		q.Set(k, v)
		return q.Encode()
	}
	for _, tc := range []struct {
		name, url, query string
		body             io.Reader
		length           int64
		want             int
	}{
		{"bad signature", addr, tampered("sig", strings.Repeat("0", 64)), nil, 0, 403},
		{"raised size", addr, tampered("size", "999999"), nil, 0, 403},
		{"later expiry", addr, tampered("exp", "9999999999"), nil, 0, 403},
		{"malformed query", addr, "%zz", nil, 0, 403},
		{"put URL's query", putAddr, putQuery, nil, 0, 403},
		{"other key", strings.Replace(addr, "/dir/seed", "/dir/other", 1), query, nil, 0, 403},
		{"other namespace", strings.Replace(addr, "/"+testNS+"/", "/ns2/", 1), query, nil, 0, 403},
		{"no header", addr, "", nil, 0, 400},
		{"query in the URL", get.URL, "", nil, 0, 400},
		{"query in both", get.URL, query, nil, 0, 400},
		{"with a body", addr, query, strings.NewReader("x"), 1, 400},
		{"with a chunked body", addr, query, io.MultiReader(strings.NewReader("x")), -1, 400},
		{"bad path", strings.Replace(addr, "/dir/seed", "/.incoming/x", 1), query, nil, 0, 400},
	} {
		if st, body := postDownload(t, tc.url, tc.query, tc.body, tc.length); st != tc.want {
			t.Errorf("%s: POST = %d %s, want %d", tc.name, st, body, tc.want)
		}
	}
	// Nothing was written: a POST never stores a blob.
	if _, err := os.Stat(filepath.Join(f.dir, DirName, testNS, "other")); !os.IsNotExist(err) {
		t.Errorf("a POST left a blob: %v", err)
	}
	os.Remove(filepath.Join(f.dir, DirName, testNS, "dir", "seed"))
	if st, _ := postDownload(t, addr, query, nil, 0); st != 404 {
		t.Errorf("POST download of a removed blob = %d, want 404", st)
	}
	f.now = t0.Add(time.Minute)
	if st, body := postDownload(t, addr, query, nil, 0); st != 403 || !strings.Contains(string(body), "expired") {
		t.Errorf("expired POST download = %d %s", st, body)
	}
	if st, _ := do(t, "DELETE", get.URL, nil); st != 405 {
		t.Errorf("DELETE = %d, want 405", st)
	}
}

// Through serve's routing and body guards, as a relay posts it.
func TestServeAnswersADownloadByPost(t *testing.T) {
	p := newPlaneFixture(t)
	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 100_000) // over the 256 KiB a reply is held whole by the relay
	st, put, _ := p.presign(t, "default", wire.ContentTypeMsgpack, presignBody("put", "k/big", nil))
	if st != 200 {
		t.Fatalf("presign put: %d", st)
	}
	req, _ := http.NewRequest(http.MethodPut, put.URL, bytes.NewReader(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT: %d", resp.StatusCode)
	}
	st, get, _ := p.presign(t, "default", wire.ContentTypeMsgpack, presignBody("get", "k/big", nil))
	if st != 200 {
		t.Fatalf("presign get: %d", st)
	}
	addr, query := splitURL(t, get.URL)
	if !strings.HasPrefix(addr, p.srv.URL+wire.BlobPathPrefix) {
		t.Fatalf("get URL %s is not under %s", addr, wire.BlobPathPrefix)
	}
	if st, body := postDownload(t, addr, query, nil, 0); st != 200 || !bytes.Equal(body, data) {
		t.Fatalf("POST download through serve = %d, %d bytes", st, len(body))
	}
	if st, _ := postDownload(t, addr, query, strings.NewReader("body"), 4); st != 400 {
		t.Fatalf("POST download with a body through serve = %d, want 400", st)
	}
}
