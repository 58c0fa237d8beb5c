// Package blobstore is `nymph serve`'s local payload store: blobs are files
// under <data-dir>/blobs/<namespace>/<key>, and presign hands out expiring
// URLs on the server itself, signed with HMAC-SHA256, that a daemon GETs or
// PUTs without any bearer.
//
// It decides the key and namespace syntax, that a key lives in its
// namespace (the same key in another namespace is another blob, and a get
// of a key its namespace lacks is refused), that a put never replaces an
// existing blob unless the request says overwrite, the URL format and its
// signature, the expiry, the size limit (wire.PayloadMax, or the size
// announced at presign for a put), and that the blob directory and every
// blob are the owner's only (0700 and 0600). It does not decide who may
// presign — the server checks the daemon's bearer on the presign route
// before calling Presign — nor where the handler is mounted
// (planeserver.BlobPathPrefix).
package blobstore

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Files and limits.
const (
	// SecretFile holds the HMAC key, inside the data directory.
	SecretFile = "blob-signing.key"
	// DirName is the blob directory inside the data directory.
	DirName = "blobs"
	// DefaultTTL is how long a presigned URL stays valid.
	DefaultTTL = 15 * time.Minute
	// MaxKeyLen bounds a key, so a URL stays well under any proxy's limit.
	MaxKeyLen = 512
	// MaxNamespaceLen bounds a namespace, one segment of the same
	// characters as a key.
	MaxNamespaceLen = 128
	secretLen       = 32
)

// Store keeps blobs under a directory and signs URLs to them.
type Store struct {
	root   *os.Root
	dir    string
	base   string // the server's base URL, without trailing slash
	secret []byte
	ttl    time.Duration
	max    int64
	log    *slog.Logger
	// now is the handler's clock; tests replace it.
	now func() time.Time
}

// Options tune a Store; zero values take the defaults.
type Options struct {
	TTL time.Duration
	Log *slog.Logger
	// Now is the clock the handler checks expiry against (default time.Now).
	Now func() time.Time
	// MaxBlob bounds a blob (default and ceiling: wire.PayloadMax).
	MaxBlob int64
}

// Open prepares <dataDir>/blobs and the signing secret (created 0600 when
// absent). baseURL is how daemons reach this server, e.g.
// http://127.0.0.1:8383; presigned URLs are absolute under it.
func Open(dataDir, baseURL string, opt Options) (*Store, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("blobstore: base URL %q: want http(s)://host[:port]", baseURL)
	}
	dir := filepath.Join(dataDir, DirName)
	if err := secretfile.EnsureDir("blob directory", dir); err != nil {
		return nil, fmt.Errorf("blobstore: %w", err)
	}
	secret, err := loadSecret(filepath.Join(dataDir, SecretFile))
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("blobstore: open %s: %w", dir, err)
	}
	s := &Store{
		root: root, dir: dir, base: strings.TrimRight(baseURL, "/"), secret: secret,
		ttl: opt.TTL, log: opt.Log, now: opt.Now, max: opt.MaxBlob,
	}
	if s.max <= 0 || s.max > wire.PayloadMax {
		s.max = wire.PayloadMax
	}
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Close releases the blob directory.
func (s *Store) Close() error { return s.root.Close() }

// loadSecret reads the signing key, creating it when absent. A key file
// others can read is refused: anyone holding it can mint URLs.
func loadSecret(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		key := make([]byte, secretLen)
		rand.Read(key)
		_, werr := f.Write([]byte(hex.EncodeToString(key) + "\n"))
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("blobstore: write secret %s: %w", path, err)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("blobstore: create secret %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("blobstore: stat secret %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("blobstore: %w", &secretfile.SharedError{What: "signing key", Path: path, Mode: fi.Mode()})
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("blobstore: read secret %s: %w", path, err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("blobstore: secret %s: want at least 16 hex-encoded bytes", path)
	}
	return key, nil
}

// ValidKey reports whether key is a clean relative blob path: segments of
// [A-Za-z0-9._-] separated by single slashes, none starting with a dot, at
// most MaxKeyLen bytes. Such a key needs no escaping in a URL and cannot
// leave the blob directory.
func ValidKey(key string) bool {
	if key == "" || len(key) > MaxKeyLen {
		return false
	}
	for seg := range strings.SplitSeq(key, "/") {
		if !validSegment(seg) {
			return false
		}
	}
	return true
}

// ValidNamespace reports whether ns is one clean segment: [A-Za-z0-9._-],
// not starting with a dot, at most MaxNamespaceLen bytes.
func ValidNamespace(ns string) bool {
	return len(ns) <= MaxNamespaceLen && validSegment(ns)
}

func validSegment(seg string) bool {
	if seg == "" || seg[0] == '.' {
		return false
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// invalid wraps a refusal so the server answers 400.
func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", planeserver.ErrPresignInvalid, fmt.Sprintf(format, a...))
}

// Presign answers a presign request: a signed URL to GET or PUT the key
// in its namespace, valid until now+TTL. A put without a key gets a fresh
// random one under jobID/kind when those are clean segments. A get of a key
// the namespace does not hold is planeserver.ErrPresignNotFound; a put of
// a key it holds is planeserver.ErrPresignConflict unless p.Overwrite, and
// the URL of a put without Overwrite still refuses to replace a blob that
// appeared in between.
func (s *Store) Presign(p planeserver.Presign, now time.Time) (wire.PresignResponse, error) {
	var method string
	switch p.Op {
	case "get":
		method = http.MethodGet
	case "put":
		method = http.MethodPut
	default:
		return wire.PresignResponse{}, invalid("op %q: want get or put", p.Op)
	}
	if !ValidNamespace(p.Namespace) {
		return wire.PresignResponse{}, invalid("namespace %q: want one segment of [A-Za-z0-9._-], not starting with a dot, at most %d bytes", p.Namespace, MaxNamespaceLen)
	}
	if p.Size < 0 || p.Size > s.max {
		return wire.PresignResponse{}, invalid("size %d: want 0..%d", p.Size, s.max)
	}
	key := p.Key
	if key == "" {
		if p.Op == "get" {
			return wire.PresignResponse{}, invalid("get needs a key")
		}
		key = freshKey(p.JobID, p.Kind)
	}
	if !ValidKey(key) {
		return wire.PresignResponse{}, invalid("key %q: want segments of [A-Za-z0-9._-] joined by /, at most %d bytes", key, MaxKeyLen)
	}
	blob := p.Namespace + "/" + key
	overwrite := p.Op == "put" && p.Overwrite
	if err := s.check(p.Op, p.Namespace, key, overwrite); err != nil {
		return wire.PresignResponse{}, err
	}
	exp := now.Add(s.ttl).Unix()
	q := url.Values{
		"exp":  {strconv.FormatInt(exp, 10)},
		"size": {strconv.FormatInt(p.Size, 10)},
		"sig":  {s.sign(method, blob, exp, p.Size, overwrite)},
	}
	if overwrite {
		q.Set("overwrite", "1")
	}
	resp := wire.PresignResponse{
		URL:       s.base + planeserver.BlobPathPrefix + blob + "?" + q.Encode(),
		Method:    method,
		Headers:   map[string]string{},
		ExpiresAt: wire.Int(exp),
	}
	if p.Op == "put" {
		resp.Headers["Content-Type"] = wire.ContentTypeOctets
	}
	return resp, nil
}

// check answers whether op may go ahead on key in namespace ns as the
// directory stands: a get needs the blob; a put needs it absent (or
// overwrite), and no blob where a directory of its key would go.
func (s *Store) check(op, ns, key string, overwrite bool) error {
	blob := ns + "/" + key
	for dir := path.Dir(blob); dir != ns; dir = path.Dir(dir) {
		if fi, err := s.root.Stat(dir); err == nil && !fi.IsDir() {
			if op == "get" {
				return fmt.Errorf("%w: no blob %q in namespace %q", planeserver.ErrPresignNotFound, key, ns)
			}
			return fmt.Errorf("%w: key %q in namespace %q: %s is a blob", planeserver.ErrPresignConflict, key, ns, strings.TrimPrefix(dir, ns+"/"))
		}
	}
	fi, err := s.root.Stat(blob)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("blobstore: stat %s: %w", blob, err)
	case op == "get" && (err != nil || !fi.Mode().IsRegular()):
		return fmt.Errorf("%w: no blob %q in namespace %q", planeserver.ErrPresignNotFound, key, ns)
	case err == nil && fi.IsDir():
		return fmt.Errorf("%w: key %q in namespace %q is the start of other keys", planeserver.ErrPresignConflict, key, ns)
	case err == nil && op == "put" && !overwrite:
		return fmt.Errorf("%w: key %q exists in namespace %q; send overwrite: true to replace it", planeserver.ErrPresignConflict, key, ns)
	}
	return nil
}

func freshKey(jobID, kind string) string {
	b := make([]byte, 16)
	rand.Read(b)
	key := hex.EncodeToString(b)
	for _, seg := range []string{kind, jobID} {
		if seg != "" && ValidKey(seg) && !strings.Contains(seg, "/") {
			key = seg + "/" + key
		}
	}
	return key
}

// sign is the URL signature: HMAC-SHA256 over method, blob path
// (namespace/key), expiry, size and overwrite, so a GET URL cannot be used
// to PUT, a URL of one namespace cannot reach another, a size cannot be
// raised and a put cannot be made to replace a blob.
func (s *Store) sign(method, blob string, exp, size int64, overwrite bool) string {
	m := hmac.New(sha256.New, s.secret)
	fmt.Fprintf(m, "nymph-blob-v2\n%s\n%s\n%d\n%d\n%t", method, blob, exp, size, overwrite)
	return hex.EncodeToString(m.Sum(nil))
}
