// Package token holds the relay's own bearer token, read from a file that an
// operator may rewrite at any time.
//
// It decides when the file is re-read (at most once per check interval,
// on use), what counts as a token (the file's content trimmed of surrounding
// whitespace), and that an empty or unreadable re-read keeps the token in
// hand, because a rotation in progress must never leave requests without a
// bearer. It refuses a file that group or others may read.
//
// It does not decide where the token goes; the relay's upstream client puts
// it in the Authorization header.
package token

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Source hands out the current token. It is safe for concurrent use.
type Source struct {
	path  string
	every time.Duration
	now   func() time.Time
	log   *slog.Logger

	tok       atomic.Pointer[string]
	nextCheck atomic.Int64 // unix nanos of the next re-read
	mu        sync.Mutex   // one re-read at a time
}

// Open reads the token file once and returns a Source that re-reads it at
// most once per every (a rewrite is seen within that interval). now is the
// clock; pass time.Now outside tests.
func Open(path string, every time.Duration, now func() time.Time, log *slog.Logger) (*Source, error) {
	s := &Source{path: path, every: every, now: now, log: log}
	tok, err := s.read()
	if err != nil {
		return nil, err
	}
	if tok == "" {
		return nil, fmt.Errorf("token: read %s: file is empty", path)
	}
	s.tok.Store(&tok)
	s.nextCheck.Store(now().Add(every).UnixNano())
	return s, nil
}

// Token returns the current token, re-reading the file when the check
// interval has passed.
func (s *Source) Token() string {
	if s.now().UnixNano() >= s.nextCheck.Load() && s.mu.TryLock() {
		s.refresh()
		s.mu.Unlock()
	}
	return *s.tok.Load()
}

func (s *Source) refresh() {
	s.nextCheck.Store(s.now().Add(s.every).UnixNano())
	tok, err := s.read()
	switch {
	case err != nil:
		s.log.Warn("relay token: keeping the current token", "path", s.path, "err", err)
	case tok == "":
		// A rewrite in progress (truncate, then write) reads as empty.
	case tok != *s.tok.Load():
		s.tok.Store(&tok)
		s.log.Info("relay token: rotated", "path", s.path)
	}
}

// ErrShared reports a token file that group or others may read.
var ErrShared = errors.New("readable by group or others (chmod 600)")

func (s *Source) read() (string, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return "", fmt.Errorf("token: open %s: %w", s.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token: stat %s: %w", s.path, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("token: %s: not a regular file", s.path)
	}
	if st.Mode().Perm()&0o044 != 0 {
		return "", fmt.Errorf("token: %s: %w", s.path, ErrShared)
	}
	// A token is short; a huge file is a mistake, not a token.
	buf := make([]byte, 16<<10)
	n, err := f.Read(buf)
	if err != nil && n == 0 && st.Size() > 0 {
		return "", fmt.Errorf("token: read %s: %w", s.path, err)
	}
	tok := bytes.TrimSpace(buf[:n])
	if bytes.ContainsAny(tok, "\r\n\x00") {
		return "", fmt.Errorf("token: %s: more than one line", s.path)
	}
	return string(tok), nil
}
