//go:build unix

package blobcache

import (
	"os"
	"path/filepath"
	"testing"
)

// Entries are read-only and every directory the cache makes is the
// owner's only. Windows has no such modes, so this is unix only.
func TestModes(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(1234, 20)
	p := insert(t, c, b)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode(); m != 0o444 {
		t.Errorf("entry mode %v, want -r--r--r--", m)
	}
	sha := digest(b)
	for _, d := range []string{
		c.Dir(),
		filepath.Join(c.Dir(), TempDirName),
		filepath.Join(c.Dir(), sha[:2]),
		filepath.Join(c.Dir(), sha[:2], sha[2:4]),
	} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode(); m != os.ModeDir|0o700 {
			t.Errorf("%s mode %v, want drwx------", d, m)
		}
	}
}
