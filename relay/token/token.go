// Package token holds the relay's own bearer token, read from a file that an
// operator may rewrite at any time.
//
// It decides when the file is re-read (at most once per check interval,
// on use) and that an empty or unreadable re-read keeps the token in hand,
// because a rotation in progress must never leave requests without a
// bearer. What a token file must be (private to its owner, one line,
// trimmed) is hostio/secretfile's rule, the same for every token nymph
// reads.
//
// It does not decide where the token goes; the relay's upstream client puts
// it in the Authorization header.
package token

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/hostio/secretfile"
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
	case errors.Is(err, secretfile.ErrEmpty):
		// A rewrite in progress (truncate, then write) reads as empty.
	case err != nil:
		s.log.Warn("relay token: keeping the current token", "path", s.path, "err", err)
	case tok != *s.tok.Load():
		s.tok.Store(&tok)
		s.log.Info("relay token: rotated", "path", s.path)
	}
}

// ErrShared reports a token file that group or others may access.
var ErrShared = secretfile.ErrShared

func (s *Source) read() (string, error) {
	tok, err := secretfile.ReadToken(s.path)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return tok, nil
}
