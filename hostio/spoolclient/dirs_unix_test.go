//go:build unix

package spoolclient

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The spool directories the daemon makes are group-writable whatever the
// umask (the relay may run as another user of the group); one that was
// there keeps its owner's mode.
func TestSpoolDirsAreGroupWritable(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	kept := filepath.Join(dir, "kept", "spool", "req")
	if err := os.MkdirAll(kept, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"fresh", "kept"} {
		if _, err := New(Config{Dir: filepath.Join(dir, m)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path string
		want os.FileMode
	}{
		{filepath.Join(dir, "fresh", "spool", "req"), 0o770},
		{filepath.Join(dir, "fresh", "spool", "resp"), 0o770},
		{kept, 0o700},
		{filepath.Join(dir, "kept", "spool", "resp"), 0o770},
	} {
		st, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != tc.want {
			t.Errorf("%s: mode %o, want %o", tc.path, got, tc.want)
		}
	}
}
