package daemonloop

import (
	"context"
	"errors"

	"github.com/nymphd/nymph/hostio/selfupdate"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Updater carries out an ota_update (*selfupdate.Updater): it returns
// only when the update did not happen, and then says why; on success the
// process is already the new binary.
type Updater interface {
	Apply(ctx context.Context, up wire.OTAUpdate) error
}

// startOTA runs one update off the loop: the download takes minutes, and
// until the exec the daemon keeps working with its binary. A second
// update while one is under way is skipped; the plane sends it again on a
// later poll if it still wants it.
func (d *driver) startOTA(e daemon.StartOTA) {
	log := d.log.With("command_id", e.CommandID, "version", e.Update.Version, "url", e.Update.URL)
	if d.opt.Updater == nil {
		log.Warn("ota_update is not supported by this build; skipped")
		return
	}
	if !d.otaBusy.CompareAndSwap(false, true) {
		log.Warn("ota_update skipped: another update is under way")
		return
	}
	log.Info("ota_update: downloading")
	go func() {
		defer d.otaBusy.Store(false)
		err := d.opt.Updater.Apply(d.bg, e.Update)
		switch {
		case errors.Is(err, selfupdate.ErrSameVersion):
			log.Info("ota_update to the running version: nothing to do")
		case err != nil:
			log.Error("ota_update failed; the running binary stays", "err", err)
		}
	}()
}

// reportedState calls FirstHello once, at the first state after a
// successful hello: the poll loop only runs after one.
func (d *driver) reportedState(state string) {
	if state == daemon.StatePolling && d.opt.FirstHello != nil && !d.helloSeen {
		d.helloSeen = true
		d.opt.FirstHello()
	}
}
