package blobstore

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Handler serves presigned URLs: GET (and HEAD) for get URLs, PUT for put
// URLs, and the download through a relay **(nymph)**: a POST with no body
// whose wire.HeaderDownloadQuery holds the get URL's query, answered as
// that GET (planeserver.DownloadByPost). It expects the full path,
// wire.BlobPathPrefix included.
func (s *Store) Handler() http.Handler {
	download := planeserver.DownloadByPost(s.download)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			download(w, r)
			return
		}
		s.serve(w, r)
	})
}

// serve answers a presigned URL itself, whose query carries its
// signature: a GET or HEAD (signed for GET) or a PUT. Any other method is
// refused.
func (s *Store) serve(w http.ResponseWriter, r *http.Request) {
	var method string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		method = http.MethodGet
	case http.MethodPut:
		method = http.MethodPut
	default:
		http.Error(w, "GET, PUT, or POST with "+wire.HeaderDownloadQuery+" only", http.StatusMethodNotAllowed)
		return
	}
	blob, overwrite, status, msg := s.authorize(r, method, r.URL.RawQuery)
	if status != 0 {
		http.Error(w, msg, status)
		return
	}
	switch method {
	case http.MethodGet:
		s.get(w, r, blob)
	case http.MethodPut:
		s.put(w, r, blob, overwrite)
	}
}

// download answers a download through a relay (docs/protocol.md,
// "Downloads through a relay"), r being the GET its POST stands for: the
// get URL's query, its signature, rides in wire.HeaderDownloadQuery, since
// a relay carries no query, and r has none of its own.
func (s *Store) download(w http.ResponseWriter, r *http.Request) {
	q := r.Header.Get(wire.HeaderDownloadQuery)
	switch {
	case q == "":
		http.Error(w, "a download POST carries the get URL's query in "+wire.HeaderDownloadQuery, http.StatusBadRequest)
		return
	case r.URL.RawQuery != "" || r.URL.ForceQuery:
		http.Error(w, "a download POST carries its query in "+wire.HeaderDownloadQuery+" only", http.StatusBadRequest)
		return
	}
	blob, _, status, msg := s.authorize(r, http.MethodGet, q)
	if status != 0 {
		http.Error(w, msg, status)
		return
	}
	s.get(w, r, blob)
}

// authorize checks path, expiry and the signature for method over query,
// and returns the blob path (namespace/key) and whether the put may
// replace a blob, or an HTTP status and message.
func (s *Store) authorize(r *http.Request, method, query string) (blob string, overwrite bool, status int, msg string) {
	// A clean key never needs escaping, so an escaped path is a trick.
	if r.URL.RawPath != "" || strings.Contains(r.URL.Path, "%") {
		return "", false, http.StatusBadRequest, "blob path must not be escaped"
	}
	blob, ok := strings.CutPrefix(r.URL.Path, wire.BlobPathPrefix)
	ns, key, _ := strings.Cut(blob, "/")
	if !ok || !ValidNamespace(ns) || !ValidKey(key) || path.Clean("/"+blob) != "/"+blob {
		return "", false, http.StatusBadRequest, "bad blob path"
	}
	q, _ := url.ParseQuery(query) // as r.URL.Query() reads it: malformed pairs dropped
	exp, err1 := strconv.ParseInt(q.Get("exp"), 10, 64)
	size, err2 := strconv.ParseInt(q.Get("size"), 10, 64)
	sig := q.Get("sig")
	if err1 != nil || err2 != nil || sig == "" {
		return "", false, http.StatusForbidden, "missing or malformed signature"
	}
	overwrite = q.Get("overwrite") == "1"
	want := s.sign(method, blob, exp, size, overwrite)
	// Constant-time: the signature is the only credential.
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return "", false, http.StatusForbidden, "bad signature"
	}
	if s.now().Unix() >= exp {
		return "", false, http.StatusForbidden, "URL expired"
	}
	return blob, overwrite, 0, ""
}

func (s *Store) get(w http.ResponseWriter, r *http.Request, key string) {
	f, err := s.root.Open(key)
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, "no such blob", http.StatusNotFound)
		return
	}
	if err != nil {
		s.log.Error("blobstore: open blob", "key", key, "err", err)
		http.Error(w, "cannot open blob", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.Error(w, "no such blob", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", wire.ContentTypeOctets)
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// put stores the body under key: written to a temporary file, synced, then
// put into place, so a reader never sees half a blob. The body may not
// exceed the size signed at presign (the store's maximum, wire.PayloadMax
// by default, when none was), and must match it exactly when one was. A
// URL presigned without overwrite never replaces a blob.
func (s *Store) put(w http.ResponseWriter, r *http.Request, key string, overwrite bool) {
	size, _ := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64) // checked by authorize
	limit := s.max
	if size > 0 {
		limit = size
	}
	if r.ContentLength > limit {
		http.Error(w, fmt.Sprintf("body of %d bytes exceeds %d", r.ContentLength, limit), http.StatusRequestEntityTooLarge)
		return
	}
	n, err := s.write(key, http.MaxBytesReader(w, r.Body, limit), size, overwrite)
	var tooBig *http.MaxBytesError
	var short *shortError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, fmt.Sprintf("body exceeds %d bytes", limit), http.StatusRequestEntityTooLarge)
	case errors.As(err, &short):
		http.Error(w, fmt.Sprintf("body of %d bytes, presigned for %d", n, size), http.StatusBadRequest)
	case errors.Is(err, fs.ErrExist):
		http.Error(w, "a blob exists under this key, and this URL was not presigned with overwrite: true", http.StatusConflict)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The server's body deadlines (an idle or a whole-body bound):
		// the client's pace, not a fault of the store.
		s.log.Debug("blobstore: blob body timed out", "key", key, "read", n, "err", err)
		http.Error(w, "reading body: "+err.Error(), http.StatusRequestTimeout)
	case err != nil:
		s.log.Error("blobstore: write blob", "key", key, "err", err)
		http.Error(w, "cannot store blob", http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// shortError is a body shorter than the size presigned for it.
type shortError struct{ got, want int64 }

func (e *shortError) Error() string {
	return fmt.Sprintf("body of %d bytes, presigned for %d", e.got, e.want)
}

// incomingDir holds uploads in progress, inside the blob directory.
const incomingDir = ".incoming"

// write stores body under key, through a temporary file, once it holds
// exactly want bytes (any number when want is 0). Without overwrite the
// file is linked into place, which fails (fs.ErrExist) when a blob is
// already there, so of two puts of one key only the first wins; with it,
// renamed over whatever is there.
func (s *Store) write(key string, body io.Reader, want int64, overwrite bool) (int64, error) {
	if dir := path.Dir(key); dir != "." {
		if err := s.root.MkdirAll(dir, 0o700); err != nil {
			return 0, fmt.Errorf("blobstore: mkdir %s: %w", dir, err)
		}
	}
	if err := s.root.MkdirAll(incomingDir, 0o700); err != nil {
		return 0, fmt.Errorf("blobstore: mkdir %s: %w", incomingDir, err)
	}
	// Temporary files live where no key can name them (keys have no
	// segment starting with a dot), so a GET never sees half a blob.
	b := make([]byte, 12)
	rand.Read(b)
	tmp := incomingDir + "/" + hex.EncodeToString(b)
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("blobstore: create %s: %w", tmp, err)
	}
	n, err := io.Copy(f, body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && want > 0 && n != want {
		err = &shortError{got: n, want: want}
	}
	switch {
	case err != nil:
	case overwrite:
		err = s.root.Rename(tmp, key)
	default:
		err = s.root.Link(tmp, key)
	}
	// After a link, the temporary name goes; after a rename it is gone.
	if rerr := s.root.Remove(tmp); err == nil && rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		s.log.Warn("blobstore: remove upload", "path", tmp, "err", rerr)
	}
	return n, err
}
