package daemonloop

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/wirecore/daemon"
)

// DeliveryFile is where, inside [runtime] workdir, the daemon keeps its
// command cursor and the ids it applied (extension cursor) across a
// restart.
const DeliveryFile = ".nymph-delivery.json"

// maxDeliveryFile bounds the file read back: MaxApplied ids are far less.
const maxDeliveryFile = 1 << 20

// delivery is DeliveryFile's content.
type delivery struct {
	Cursor  uint64   `json:"cursor"`
	Applied []string `json:"applied"`
}

// LoadDelivery reads path: no file is a fresh daemon (0, nil, nil).
func LoadDelivery(path string) (cursor uint64, applied []string, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("daemonloop: read %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDeliveryFile+1))
	if err != nil {
		return 0, nil, fmt.Errorf("daemonloop: read %s: %w", path, err)
	}
	if len(data) > maxDeliveryFile {
		return 0, nil, fmt.Errorf("daemonloop: %s is over %d bytes", path, maxDeliveryFile)
	}
	var d delivery
	if err := json.Unmarshal(data, &d); err != nil {
		return 0, nil, fmt.Errorf("daemonloop: decode %s: %w", path, err)
	}
	if len(d.Applied) > daemon.MaxApplied {
		d.Applied = d.Applied[len(d.Applied)-daemon.MaxApplied:]
	}
	return d.Cursor, d.Applied, nil
}

// persistDelivery writes the cursor and applied ids, atomically, before
// the loop goes on: the next poll names that cursor, so it must outlive a
// crash right after.
func (d *driver) persistDelivery(e daemon.PersistDelivery) {
	if d.opt.DeliveryPath == "" {
		return
	}
	data, err := json.Marshal(delivery{Cursor: e.Cursor, Applied: e.Applied})
	if err == nil {
		err = secretfile.WriteFile(d.opt.DeliveryPath, data, 0o600)
	}
	if err != nil {
		d.log.Warn("command cursor not kept; a restart may be handed applied commands again, and skips none of them", "path", d.opt.DeliveryPath, "err", err)
	}
}
