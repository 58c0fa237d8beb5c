package secretfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteIsPrivateAndReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "key")
	if err := Write(path, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o, want 600", st.Mode().Perm())
	}
	if got, err := ReadToken(path); err != nil || got != "two" {
		t.Fatalf("read back %q, %v", got, err)
	}
	dirSt, _ := os.Stat(filepath.Dir(path))
	if dirSt.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %o, want 700", dirSt.Mode().Perm())
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*.tmp"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
