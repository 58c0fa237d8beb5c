package daemonloop

import (
	"context"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// blockingUpdater records each update and holds it until release closes.
type blockingUpdater struct {
	got     chan wire.OTAUpdate
	release chan struct{}
}

func (u *blockingUpdater) Apply(ctx context.Context, up wire.OTAUpdate) error {
	u.got <- up
	<-u.release
	return nil
}

// An ota_update goes to the Updater off the loop; a second one while the
// first is under way is skipped, and one after it finished is carried out.
func TestStartOTA(t *testing.T) {
	u := &blockingUpdater{got: make(chan wire.OTAUpdate, 4), release: make(chan struct{})}
	d := newDriver(Options{Transport: &recordingTransport{}, Updater: u})
	defer d.stop()
	up := wire.OTAUpdate{Version: "2", URL: "https://plane.example/v1/releases/x", SHA256: "ab"}
	d.do(daemon.StartOTA{CommandID: "c1", Update: up})
	select {
	case got := <-u.got:
		if got != up {
			t.Fatalf("Apply(%+v), want %+v", got, up)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the update never reached the Updater")
	}
	d.do(daemon.StartOTA{CommandID: "c2", Update: up})
	close(u.release)
	select {
	case got := <-u.got:
		t.Fatalf("a second update ran while the first was under way: %+v", got)
	case <-time.After(100 * time.Millisecond):
	}
	deadline := time.Now().Add(5 * time.Second)
	for d.otaBusy.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the first update never finished")
		}
		time.Sleep(time.Millisecond)
	}
	d.do(daemon.StartOTA{CommandID: "c3", Update: up})
	select {
	case <-u.got:
	case <-time.After(5 * time.Second):
		t.Fatal("an update after the first finished was not carried out")
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
