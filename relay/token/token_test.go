package token

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func write(t *testing.T, path, s string, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write(t, path, "  first\n", 0o600)
	c := &clock{t: time.Unix(1000, 0)}
	s, err := Open(path, time.Second, c.now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Token(); got != "first" {
		t.Fatalf("token = %q, want trimmed %q", got, "first")
	}
	write(t, path, "second\n", 0o600)
	if got := s.Token(); got != "first" {
		t.Fatalf("re-read before the interval: %q", got)
	}
	c.t = c.t.Add(time.Second)
	if got := s.Token(); got != "second" {
		t.Fatalf("after rotation: %q", got)
	}
	// A rewrite in progress (empty file) keeps the token.
	write(t, path, "\n", 0o600)
	c.t = c.t.Add(time.Second)
	if got := s.Token(); got != "second" {
		t.Fatalf("empty read: %q", got)
	}
	// So does a missing file or one others may read.
	os.Remove(path)
	c.t = c.t.Add(time.Second)
	if got := s.Token(); got != "second" {
		t.Fatalf("missing file: %q", got)
	}
	write(t, path, "third", 0o644)
	c.t = c.t.Add(time.Second)
	if got := s.Token(); got != "second" {
		t.Fatalf("shared file: %q", got)
	}
	write(t, path, "third", 0o400)
	c.t = c.t.Add(time.Second)
	if got := s.Token(); got != "third" {
		t.Fatalf("private again: %q", got)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	shared := filepath.Join(dir, "shared")
	write(t, shared, "tok", 0o640)
	if _, err := Open(shared, time.Second, time.Now, log); !errors.Is(err, ErrShared) {
		t.Errorf("group-readable: %v", err)
	}
	others := filepath.Join(dir, "others")
	write(t, others, "tok", 0o604)
	if _, err := Open(others, time.Second, time.Now, log); !errors.Is(err, ErrShared) {
		t.Errorf("other-readable: %v", err)
	}
	// Write access is access too: one rule for every token file.
	for _, mode := range []os.FileMode{0o620, 0o602, 0o610, 0o601} {
		p := filepath.Join(dir, "w"+mode.String())
		write(t, p, "tok", mode)
		_, err := Open(p, time.Second, time.Now, log)
		if !errors.Is(err, ErrShared) || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("mode %04o: %v, want refused with the fix", mode, err)
		}
	}
	empty := filepath.Join(dir, "empty")
	write(t, empty, " \n", 0o600)
	if _, err := Open(empty, time.Second, time.Now, log); err == nil {
		t.Error("empty token accepted")
	}
	if _, err := Open(filepath.Join(dir, "missing"), time.Second, time.Now, log); err == nil {
		t.Error("missing file accepted")
	}
	two := filepath.Join(dir, "two")
	write(t, two, "a\nb\n", 0o600)
	if _, err := Open(two, time.Second, time.Now, log); err == nil {
		t.Error("two lines accepted")
	}
}
