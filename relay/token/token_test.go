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
	for _, step := range []struct {
		what    string
		change  func()
		advance bool // past the re-read interval
		want    string
	}{
		{"re-read before the interval", func() { write(t, path, "second\n", 0o600) }, false, "first"},
		{"after rotation", func() {}, true, "second"},
		// A rewrite in progress (empty file) keeps the token.
		{"empty read", func() { write(t, path, "\n", 0o600) }, true, "second"},
		// So does a missing file or one others may read.
		{"missing file", func() { os.Remove(path) }, true, "second"},
		{"shared file", func() { write(t, path, "third", 0o644) }, true, "second"},
		{"private again", func() { write(t, path, "third", 0o400) }, true, "third"},
	} {
		step.change()
		if step.advance {
			c.t = c.t.Add(time.Second)
		}
		if got := s.Token(); got != step.want {
			t.Fatalf("%s: token = %q, want %q", step.what, got, step.want)
		}
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
