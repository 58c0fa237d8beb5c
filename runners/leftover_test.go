package runners

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// fakeReaper is a runner whose runs leave file, and which records what
// its Stop is handed.
type fakeReaper struct {
	kind, file string
	stopErr    error
	stopped    []string      // "workdir:content" of each Stop
	deadlines  []time.Time   // the ctx deadline each Stop saw
	wait       time.Duration // how long each Stop takes
}

func (f *fakeReaper) Kind() string { return f.kind }
func (f *fakeReaper) Run(context.Context, Invocation) Outcome {
	return Outcome{State: wire.StateSucceeded}
}
func (f *fakeReaper) Leftovers() Leftovers {
	return Leftovers{File: f.file, Noun: f.kind + " thing", Stop: func(ctx context.Context, workdir, content string) error {
		f.stopped = append(f.stopped, filepath.Base(workdir)+":"+content)
		d, _ := ctx.Deadline()
		f.deadlines = append(f.deadlines, d)
		time.Sleep(f.wait)
		return f.stopErr
	}}
}

func writeLeftover(t *testing.T, root, dir, file, content string) string {
	t.Helper()
	p := filepath.Join(root, dir, file)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two runners that leave the same file (docker and gvisor) have it swept
// once, by the first in kind order, even when what it names could not be
// stopped and the record stays; a stopped one's record goes.
func TestReapSweepsEachFileOnce(t *testing.T) {
	for _, stopErr := range []error{errors.New("refused"), nil} {
		root := t.TempDir()
		p := writeLeftover(t, root, "inv-1", "thing.id", "abc")
		first := &fakeReaper{kind: "a", file: "thing.id", stopErr: stopErr}
		second := &fakeReaper{kind: "b", file: "thing.id", stopErr: stopErr}
		NewRegistry(Config{Root: root}, second, first).Reap(context.Background())
		if len(first.stopped) != 1 || first.stopped[0] != "inv-1:abc" || len(second.stopped) != 0 {
			t.Errorf("stop %v: stopped by the first %q, by the second %q; want inv-1:abc once, by the first", stopErr, first.stopped, second.stopped)
		}
		if _, err := os.Stat(p); (err == nil) != (stopErr != nil) {
			t.Errorf("stop %v: record: %v", stopErr, err)
		}
	}
}

// The first hello waits on one ReapTimeout for every Reaper together, not
// on one each: every Stop sees the same deadline, and once it has passed
// what is left is not tried (and kept for the next start).
func TestReapHasOneTimeout(t *testing.T) {
	root := t.TempDir()
	writeLeftover(t, root, "inv-1", "a.id", "1")
	writeLeftover(t, root, "inv-2", "b.id", "2")
	a := &fakeReaper{kind: "a", file: "a.id", wait: 10 * time.Millisecond}
	b := &fakeReaper{kind: "b", file: "b.id"}
	NewRegistry(Config{Root: root}, a, b).Reap(context.Background())
	if len(a.deadlines) != 1 || len(b.deadlines) != 1 {
		t.Fatalf("stops: %q %q", a.stopped, b.stopped)
	}
	if a.deadlines[0].IsZero() || !a.deadlines[0].Equal(b.deadlines[0]) {
		t.Errorf("deadlines %v and %v, want one and the same", a.deadlines[0], b.deadlines[0])
	}

	kept := writeLeftover(t, root, "inv-3", "a.id", "3")
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	c := &fakeReaper{kind: "c", file: "a.id"}
	var logged bytes.Buffer
	NewRegistry(Config{Root: root, Log: slog.New(slog.NewTextHandler(&logged, nil))}, c).Reap(ended)
	if len(c.stopped) != 0 {
		t.Errorf("stopped after the sweep's time was up: %q", c.stopped)
	}
	if !strings.Contains(logged.String(), "not swept") {
		t.Errorf("a sweep cut short is not logged:\n%s", logged.String())
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a record not tried was removed: %v", err)
	}
}

// What the log says of a record it could not act on names what it holds,
// with the reaper's noun.
func TestReapLogsTheID(t *testing.T) {
	root := t.TempDir()
	failed := writeLeftover(t, root, "inv-1", "a.id", "4242")
	var logged bytes.Buffer
	r := &fakeReaper{kind: "slurm", file: "a.id", stopErr: errors.New("scancel 4242: exit status 1: boom")}
	NewRegistry(Config{Root: root, Log: slog.New(slog.NewTextHandler(&logged, nil))}, r).Reap(context.Background())
	out := logged.String()
	for _, want := range []string{`msg="slurm thing of an earlier daemon's run not stopped`, "id=4242", "file=" + failed, "scancel 4242: exit status 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(failed); err != nil {
		t.Errorf("record of work not stopped was removed: %v", err)
	}
}

// Follow writes the record and release removes it; with no content it
// only clears one left from before, for a client that writes its own.
func TestFollow(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.id")
	release, err := Follow(dir, "x.id", "77")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "77\n" {
		t.Fatalf("record %q %v", b, err)
	}
	release()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("record kept after release: %v", err)
	}
	os.WriteFile(p, []byte("old"), 0o600)
	release, err = Follow(dir, "x.id", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("an old record kept for a client that writes its own: %v", err)
	}
	release()
	if release, err := Follow(filepath.Join(dir, "missing"), "x.id", "1"); err == nil || !strings.Contains(err.Error(), "x.id") || release == nil {
		t.Fatalf("Follow into a missing workdir: %v (release %v)", err, release != nil)
	}
}
