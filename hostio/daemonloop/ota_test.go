package daemonloop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// fakeUpdater "downloads" into a file of dir and records what it is asked.
type fakeUpdater struct {
	dir                   string
	prepareErr, commitErr error
	committed             chan string
}

func (u *fakeUpdater) Prepare(_ context.Context, up wire.OTAUpdate) (string, error) {
	if u.prepareErr != nil {
		return "", u.prepareErr
	}
	tmp := filepath.Join(u.dir, ".nymph-ota-"+up.Version+".tmp")
	return tmp, os.WriteFile(tmp, []byte("new binary"), 0o755)
}

func (u *fakeUpdater) Commit(version, tmp string) error {
	u.committed <- version + "=" + tmp
	if u.commitErr != nil {
		os.Remove(tmp)
	}
	return u.commitErr
}

func nextEvent(t *testing.T, d *driver) any {
	t.Helper()
	select {
	case ev := <-d.events:
		return d.unwrap(ev)
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return nil
}

// The download is reported to the machine; ApplyOTA commits the verified
// file it kept, and a failed commit is reported back.
func TestOTAPrepareThenCommit(t *testing.T) {
	u := &fakeUpdater{dir: t.TempDir(), committed: make(chan string, 1), commitErr: errors.New("exec failed")}
	d := newDriver(Options{Transport: &recordingTransport{}, Updater: u})
	defer d.stop()
	d.do(daemon.StartOTA{CommandID: "c1", Update: wire.OTAUpdate{Version: "2", URL: "https://plane.example/x", SHA256: "ab"}})
	got, ok := nextEvent(t, d).(daemon.OTAFetched)
	if !ok || got.Err != nil || got.CommandID != "c1" || got.Version != "2" {
		t.Fatalf("fed %#v", got)
	}
	tmp := filepath.Join(u.dir, ".nymph-ota-2.tmp")
	d.do(daemon.ApplyOTA{CommandID: "c1", Version: "2"})
	if c := <-u.committed; c != "2="+tmp {
		t.Fatalf("committed %s", c)
	}
	if ev, ok := nextEvent(t, d).(daemon.OTAApplied); !ok || ev.Err == nil {
		t.Fatalf("fed %#v, want the commit's failure", ev)
	}
}

// A discarded update's file is removed; a failed download reports its error.
func TestOTADiscardAndFailedDownload(t *testing.T) {
	u := &fakeUpdater{dir: t.TempDir(), committed: make(chan string, 1)}
	d := newDriver(Options{Transport: &recordingTransport{}, Updater: u})
	defer d.stop()
	d.do(daemon.StartOTA{CommandID: "c1", Update: wire.OTAUpdate{Version: "3"}})
	nextEvent(t, d)
	tmp := filepath.Join(u.dir, ".nymph-ota-3.tmp")
	if _, err := os.Stat(tmp); err != nil {
		t.Fatal(err)
	}
	d.do(daemon.DiscardOTA{CommandID: "c1"})
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("discarded update still on disk: %v", err)
	}
	u.prepareErr = errors.New("sha256 mismatch")
	d.do(daemon.StartOTA{CommandID: "c2", Update: wire.OTAUpdate{Version: "4"}})
	if ev, ok := nextEvent(t, d).(daemon.OTAFetched); !ok || ev.Err == nil {
		t.Fatalf("fed %#v, want the download's failure", ev)
	}
}

// FirstHello is called once, at the first polling state.
func TestFirstHello(t *testing.T) {
	calls := 0
	d := newDriver(Options{Transport: &recordingTransport{}, FirstHello: func() { calls++ }})
	defer d.stop()
	for _, s := range []string{daemon.StateHello, daemon.StateBackoff, daemon.StateHello} {
		d.do(daemon.ReportState{State: s})
	}
	if calls != 0 {
		t.Fatalf("FirstHello called %d times before polling", calls)
	}
	for _, s := range []string{daemon.StatePolling, daemon.StateBackoff, daemon.StatePolling} {
		d.do(daemon.ReportState{State: s})
	}
	if calls != 1 {
		t.Fatalf("FirstHello called %d times, want once", calls)
	}
}
