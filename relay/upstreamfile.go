//go:build unix

package relay

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/wirecore/wire"
)

// writeUpstreamFile writes wire.RelayUpstreamFile into the prefix: the
// upstream and the fingerprint of the CA the relay verifies it by, which
// a daemon behind the relay checks a join token's pin against before the
// token's secret leaves its host. It is replaced atomically (a temporary
// name, then rename), so a daemon reads the old file or the new one.
func (rl *Relay) writeUpstreamFile() error {
	fp, err := caFingerprint(rl.cfg.CAFile)
	if err != nil {
		return err
	}
	if rl.up.base.URL("/").Scheme != "https" {
		fp = "" // a plain http upstream is verified by nothing
	}
	data, err := json.Marshal(wire.RelayUpstream{Server: rl.up.base.String(), CAFingerprint: fp})
	if err != nil {
		return fmt.Errorf("relay: encode %s: %w", wire.RelayUpstreamFile, err)
	}
	path := filepath.Join(rl.root.path, wire.RelayUpstreamFile)
	if err := secretfile.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	rl.log.Info("relay: upstream file written", "path", path, "ca_fingerprint", fp)
	return nil
}
