package daemonloop

import (
	"context"
	"errors"
	"os"

	"github.com/nymphd/nymph/hostio/selfupdate"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Updater carries out an ota_update (*selfupdate.Updater) in two steps,
// so the daemon can drain between them: Prepare downloads and verifies
// the binary into a file beside the executable; Commit installs that file
// and executes it, returning only when the update did not happen (then
// the running binary is unchanged and the file removed).
type Updater interface {
	Prepare(ctx context.Context, up wire.OTAUpdate) (string, error)
	Commit(version, tmp string) error
}

// startOTA downloads one update off the loop: it takes minutes, and the
// daemon keeps working meanwhile. The machine hears OTAFetched, and asks
// for ApplyOTA once it has drained (or DiscardOTA).
func (d *driver) startOTA(e daemon.StartOTA) {
	log := d.log.With("command_id", e.CommandID, "version", e.Update.Version, "url", e.Update.URL)
	if d.opt.Updater == nil {
		log.Warn("ota_update is not supported by this build; skipped")
		return
	}
	log.Info("ota_update: downloading")
	go func() {
		tmp, err := d.opt.Updater.Prepare(d.bg, e.Update)
		if errors.Is(err, selfupdate.ErrSameVersion) {
			log.Info("ota_update to the running version: nothing to do")
			err = nil
			tmp = ""
		}
		if err == nil && tmp == "" {
			err = errors.New("nothing to install")
		}
		if err == nil {
			log.Info("ota_update downloaded and verified; draining before installing it", "file", tmp)
		}
		d.feed(otaFetched{ev: daemon.OTAFetched{CommandID: e.CommandID, Version: e.Update.Version, Err: err}, tmp: tmp})
	}()
}

// otaFetched lets the loop keep the verified file's path, which the
// machine does not need, until ApplyOTA or DiscardOTA.
type otaFetched struct {
	ev  daemon.OTAFetched
	tmp string
}

// applyOTA installs and executes the update on the loop goroutine: the
// machine has drained, nothing else is left to do, and on success the
// process image is replaced here.
func (d *driver) applyOTA(e daemon.ApplyOTA) {
	tmp := d.otaFiles[e.CommandID]
	delete(d.otaFiles, e.CommandID)
	var err error
	if tmp == "" {
		err = errors.New("the downloaded binary is gone")
	} else {
		err = d.opt.Updater.Commit(e.Version, tmp)
	}
	d.feedLater(daemon.OTAApplied{CommandID: e.CommandID, Err: err})
}

// discardOTA removes a verified binary the machine will not install.
func (d *driver) discardOTA(e daemon.DiscardOTA) {
	if tmp := d.otaFiles[e.CommandID]; tmp != "" {
		if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("cannot remove a downloaded update", "file", tmp, "err", err)
		}
	}
	delete(d.otaFiles, e.CommandID)
}

// reportedState calls FirstHello once, at the first state after a
// successful hello: the poll loop only runs after one.
func (d *driver) reportedState(state string) {
	if state == daemon.StatePolling && d.opt.FirstHello != nil && !d.helloSeen {
		d.helloSeen = true
		d.opt.FirstHello()
	}
}
