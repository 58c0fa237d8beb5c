//go:build unix

package secretfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// writeMode writes a file and sets its mode exactly, whatever the umask.
func writeMode(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestReadTokenModeRule(t *testing.T) {
	dir := t.TempDir()
	// Owner bits never matter; every group or other bit, alone, is refused.
	for _, mode := range []os.FileMode{0o600, 0o400, 0o700, 0o200} {
		p := filepath.Join(dir, fmt.Sprintf("ok-%04o", mode))
		writeMode(t, p, "tok\n", mode)
		if got, err := ReadToken(p); err != nil || got != "tok" {
			t.Errorf("mode %04o: %q, %v; want accepted", mode, got, err)
		}
	}
	for bit := os.FileMode(1); bit <= 0o040; bit <<= 1 {
		mode := 0o600 | bit
		p := filepath.Join(dir, fmt.Sprintf("shared-%04o", mode))
		writeMode(t, p, "tok\n", mode)
		_, err := ReadToken(p)
		if !errors.Is(err, ErrShared) {
			t.Errorf("mode %04o: %v; want refused", mode, err)
			continue
		}
		for _, want := range []string{"token file " + p, fmt.Sprintf("mode %04o", mode), "chmod 600 " + p} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("mode %04o: %q does not say %q", mode, err, want)
			}
		}
	}
}

func TestReadTokenContent(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want, errText string
	}{
		{"trimmed", " \t tok-1 \r\n", "tok-1", ""},
		{"at the limit", strings.Repeat("a", MaxToken), strings.Repeat("a", MaxToken), ""},
		{"over the limit", strings.Repeat("a", MaxToken+1), "", "larger than 16384 bytes"},
		{"empty", "", "", "file is empty"},
		{"whitespace", " \n\n", "", "file is empty"},
		{"two lines", "a\nb\n", "", "more than one line"},
		{"nul", "a\x00b", "", "more than one line"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		writeMode(t, p, tc.content, 0o600)
		got, err := ReadToken(p)
		if tc.errText == "" {
			if err != nil || got != tc.want {
				t.Errorf("%s: %q, %v", tc.name, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.errText) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want %q naming the file", tc.name, err, tc.errText)
		}
	}
	if _, err := ReadToken(filepath.Join(dir, "empty")); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty: %v, want ErrEmpty", err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := ReadToken(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing: %v", err)
	}
	sub := filepath.Join(dir, "adir")
	os.Mkdir(sub, 0o700)
	if _, err := ReadToken(sub); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	// A symlink to a private file is fine (a mounted secret often is one).
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "trimmed"), link); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadToken(link); err != nil || got != "tok-1" {
		t.Errorf("symlink: %q, %v", got, err)
	}
}

func TestEnsureDir(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	root := t.TempDir()
	fresh := filepath.Join(root, "a", "data")
	if err := EnsureDir("data directory", fresh); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(fresh); st.Mode().Perm() != 0o700 {
		t.Errorf("created %v, want 0700 even under umask 0", st.Mode())
	}
	if err := EnsureDir("data directory", fresh); err != nil {
		t.Errorf("existing 0700: %v", err)
	}
	for bit := os.FileMode(1); bit <= 0o040; bit <<= 1 {
		mode := 0o700 | bit
		os.Chmod(fresh, mode)
		err := EnsureDir("data directory", fresh)
		want := fmt.Sprintf("data directory %s has group or world access (mode %04o); chmod 700 %s", fresh, mode, fresh)
		if !errors.Is(err, ErrShared) || err.Error() != want {
			t.Errorf("mode %04o: %v, want %q", mode, err, want)
		}
	}
	os.Chmod(fresh, 0o700)
	file := filepath.Join(root, "file")
	writeMode(t, file, "", 0o600)
	if err := EnsureDir("data directory", file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file: %v", err)
	}
}

func TestEnsureFile(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := t.TempDir()
	p := filepath.Join(dir, "db")
	if narrowed, err := EnsureFile(p); err != nil || narrowed {
		t.Fatalf("absent: %v %v", narrowed, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 || st.Size() != 0 {
		t.Errorf("created %v size %d, want 0600 and empty even under umask 0", st.Mode(), st.Size())
	}
	writeMode(t, p, "records", 0o600)
	if narrowed, err := EnsureFile(p); err != nil || narrowed {
		t.Errorf("private: %v %v", narrowed, err)
	}
	os.Chmod(p, 0o644)
	if narrowed, err := EnsureFile(p); err != nil || !narrowed {
		t.Errorf("shared: %v %v, want narrowed", narrowed, err)
	}
	st, _ := os.Stat(p)
	b, _ := os.ReadFile(p)
	if st.Mode().Perm() != 0o600 || string(b) != "records" {
		t.Errorf("after narrowing: %v %q, want 0600 with the content kept", st.Mode(), b)
	}
	if _, err := EnsureFile(dir); err == nil {
		t.Error("a directory accepted as a file")
	}
}
