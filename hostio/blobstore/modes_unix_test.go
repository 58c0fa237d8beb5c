//go:build unix

package blobstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestBlobFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	f := newFixture(t)
	f.store(t, "job1/args.msgpack", "args")
	for rel, want := range map[string]os.FileMode{
		DirName: 0o700, DirName + "/" + testNS: 0o700, DirName + "/" + testNS + "/job1": 0o700,
		DirName + "/" + testNS + "/job1/args.msgpack": 0o600, DirName + "/" + incomingDir: 0o700, SecretFile: 0o600,
	} {
		st, err := os.Stat(filepath.Join(f.dir, rel))
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %04o even under umask 0", rel, st.Mode(), err, want)
		}
	}
	// A blob directory others can enter is refused, with the fix.
	dir := filepath.Join(f.dir, DirName)
	os.Chmod(dir, 0o755)
	_, err := Open(f.dir, f.srv.URL, Options{})
	if want := fmt.Sprintf("blob directory %s has group or world access (mode 0755); chmod 700 %s", dir, dir); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("shared blob directory: %v, want %q", err, want)
	}
}
