//go:build unix

package sqlstore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nymphd/nymph/hostio/planeserver/storetest"
	"github.com/nymphd/nymph/wirecore/plane"
)

// withUmask runs the test under the umask most systems start with, so a
// file SQLite creates on its own would come out 0644.
func withUmask(t *testing.T, mask int) {
	t.Helper()
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// checkModes fails unless dir is 0700 and every file in it 0600.
func checkModes(t *testing.T, dir string, want ...string) {
	t.Helper()
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v %v, want 0700", st.Mode(), err)
	}
	for _, name := range want {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", name, st.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %04o, readable by others", e.Name(), info.Mode().Perm())
		}
	}
}

func TestEveryFileIsPrivateFromTheFirstWrite(t *testing.T) {
	withUmask(t, 0o022)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, storetest.SampleBatch()); err != nil {
		t.Fatal(err)
	}
	// The records are in the WAL now (no checkpoint yet): the file a second
	// user read an exec's secrets out of.
	wal, err := os.ReadFile(s.Path() + "-wal")
	if err != nil || !bytes.Contains(wal, []byte("laptop")) {
		t.Fatalf("the WAL does not hold the batch (%d bytes, %v); the test would prove nothing", len(wal), err)
	}
	checkModes(t, dir, FileName, FileName+"-wal", FileName+"-shm")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// SQLite removes -wal and -shm at close and makes them again on the next
	// open: still the owner's only.
	s = open(t, dir)
	if err := s.Apply(ctx, plane.Batch{Workers: storetest.SampleBatch().Workers}); err != nil {
		t.Fatal(err)
	}
	checkModes(t, dir, FileName, FileName+"-wal", FileName+"-shm")
}

func TestFilesAnOlderVersionLeftOpenAreNarrowed(t *testing.T) {
	withUmask(t, 0o022)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// An older version left the database 0600 but its WAL 0644, with
	// records in it (a kill -9: no checkpoint at close).
	db := filepath.Join(dir, FileName)
	for _, name := range []string{FileName + "-wal", FileName + "-shm"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, name), 0o644)
	}
	s, err := OpenFile(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkModes(t, dir, FileName, FileName+"-wal", FileName+"-shm")
	if err := s.Apply(ctx, storetest.SampleBatch()); err != nil {
		t.Fatal(err)
	}
	if snap, err := s.Load(ctx); err != nil || len(snap.Workers) != 1 {
		t.Fatalf("records after narrowing: %v, %v", snap.Workers, err)
	}
}
