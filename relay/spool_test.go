//go:build unix

package relay

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/frame"
	"golang.org/x/sys/unix"
)

// spoolDaemon is the daemon's side of the spool, as the contract says.
type spoolDaemon struct{ dir string }

func newSpoolDaemon(t testing.TB, machine string) spoolDaemon {
	for _, d := range []string{"req", "resp"} {
		if err := os.MkdirAll(filepath.Join(machine, "spool", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return spoolDaemon{dir: filepath.Join(machine, "spool")}
}

// put writes req/<id>.tmp and renames it into place.
func (s spoolDaemon) put(t testing.TB, id string, payload []byte) {
	tmp := filepath.Join(s.dir, "req", id+".tmp")
	if err := os.WriteFile(tmp, frame.Append(nil, payload), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "req", id+".frame")); err != nil {
		t.Fatal(err)
	}
}

// take waits for resp/<id>.frame, reads it and removes it.
func (s spoolDaemon) take(t testing.TB, id string) []byte {
	path := filepath.Join(s.dir, "resp", id+".frame")
	var data []byte
	testkit.WaitUntil(t, deadline, "spool reply "+id, func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil
	})
	os.Remove(path)
	p, _, err := frame.Split(data)
	if err != nil {
		t.Fatalf("reply file: %v", err)
	}
	return p
}

// awaitServed waits until the relay has removed the request file of each
// id, as it does once the request is answered.
func (s spoolDaemon) awaitServed(t testing.TB, ids ...string) {
	t.Helper()
	for _, id := range ids {
		testkit.WaitUntil(t, deadline, "request "+id+" removed", func() bool { return !exists(filepath.Join(s.dir, "req", id+".frame")) })
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

func TestSpoolRoundTrip(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	sd := newSpoolDaemon(t, filepath.Join(prefix, "remote1"))
	startRelay(t, prefix, fp.URL, nil)

	sd.put(t, "b1-1", envelope(t, "/v1/daemon/poll", "b1-1", []byte("q")))
	sd.put(t, "b1-2", envelope(t, "/v1/daemon/ack", "b1-2", []byte("r")))
	for id, want := range map[string]string{"b1-1": "echo:q", "b1-2": "echo:r"} {
		rep := decodeReply(t, sd.take(t, id))
		if rep.ID != id || rep.Status != 200 || string(rep.Body) != want {
			t.Fatalf("reply %s = %+v", id, rep)
		}
	}
	sd.awaitServed(t, "b1-1", "b1-2")
	// A mismatched id is refused under the file's name.
	sd.put(t, "b1-3", envelope(t, "/v1/daemon/poll", "other", nil))
	if rep := decodeReply(t, sd.take(t, "b1-3")); rep.ID != "b1-3" || rep.Status != 400 {
		t.Fatalf("mismatched id reply = %+v", rep)
	}
	fp.wantSeen(t, 2)
}

func TestSpoolRestartReserves(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	sd := newSpoolDaemon(t, filepath.Join(prefix, "remote1"))
	// Left from before a restart: one request never answered, one answered
	// whose removal was missed.
	sd.put(t, "old-1", envelope(t, "/v1/daemon/ack", "old-1", []byte("1")))
	sd.put(t, "old-2", envelope(t, "/v1/daemon/ack", "old-2", []byte("2")))
	answered := filepath.Join(sd.dir, "resp", "old-2.frame")
	os.WriteFile(answered, frame.Append(nil, []byte("kept")), 0o600)

	startRelay(t, prefix, fp.URL, nil)
	if rep := decodeReply(t, sd.take(t, "old-1")); rep.ID != "old-1" || string(rep.Body) != "echo:1" {
		t.Fatalf("re-served reply = %+v", rep)
	}
	sd.awaitServed(t, "old-2") // the one answered before the restart
	if p := sd.take(t, "old-2"); string(p) != "kept" {
		t.Fatalf("an existing reply was replaced: %q", p)
	}
	fp.wantSeen(t, 1)
}

func TestSpoolDirCreatedLater(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	rl, _, _ := startRelay(t, prefix, fp.URL, nil)
	sd := newSpoolDaemon(t, filepath.Join(prefix, "late"))
	testkit.WaitUntil(t, deadline, "the spool dir", func() bool { return rl.metrics.spoolDirs.Load() == 1 })
	sd.put(t, "x1", envelope(t, "/v1/daemon/poll", "x1", nil))
	if rep := decodeReply(t, sd.take(t, "x1")); rep.Status != 200 {
		t.Fatalf("reply = %+v", rep)
	}
}

// A spool reply larger than the relay holds is copied into its file as it
// arrives, chunked or sized.
func TestSpoolLargeReply(t *testing.T) {
	const n = 20 << 20
	for _, chunked := range []bool{false, true} {
		url := bigReplyPlane(t, n, chunked, 200)
		prefix := t.TempDir()
		sd := newSpoolDaemon(t, filepath.Join(prefix, "remote1"))
		startRelay(t, prefix, url, nil)
		sd.put(t, "big-1", envelope(t, "/v1/daemon/poll", "big-1", nil))
		rep := decodeReply(t, sd.take(t, "big-1"))
		if rep.ID != "big-1" || rep.Status != 200 || !patternOK(rep.Body, n) {
			t.Fatalf("chunked=%v: reply id %q status %d, %d body bytes", chunked, rep.ID, rep.Status, len(rep.Body))
		}
	}
}

// A FIFO made under a request's name, or under a reply's temporary name,
// blocks neither the relay nor its shutdown: the request is refused as
// not a regular file, the reply is written to a file made afresh, and
// the requests beside them are served.
func TestSpoolFIFOsDoNotBlock(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	sd := newSpoolDaemon(t, filepath.Join(prefix, "m1"))
	for _, name := range []string{filepath.Join("req", "fifo1.frame"), filepath.Join("resp", "ok2.tmp")} {
		if err := unix.Mkfifo(filepath.Join(sd.dir, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, cancel, done := startRelay(t, prefix, fp.URL, func(c *Config) { c.ShutdownGrace = 200 * time.Millisecond })
	for _, id := range []string{"ok1", "ok2"} {
		sd.put(t, id, envelope(t, "/v1/daemon/poll", id, nil))
		if rep := decodeReply(t, sd.take(t, id)); rep.ID != id || rep.Status != 200 {
			t.Fatalf("reply %s = %+v", id, rep)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		// Unblock the opens so the test can end.
		for _, name := range []string{filepath.Join("req", "fifo1.frame"), filepath.Join("resp", "ok2.tmp")} {
			if fd, err := unix.Open(filepath.Join(sd.dir, name), unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
		<-done
		t.Fatal("the relay did not stop within 5 s of its cancel (grace 200 ms): an open of a FIFO blocked it")
	}
}
