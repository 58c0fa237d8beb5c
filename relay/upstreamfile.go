package relay

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/hostio/tlsca"
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

// caFingerprint is the fingerprint of the first certificate in the CA
// file, "" without one (the system's roots).
func caFingerprint(caFile string) (string, error) {
	if caFile == "" {
		return "", nil
	}
	data, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("relay: read CA file: %w", err)
	}
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return "", fmt.Errorf("relay: CA file %s holds no PEM certificate", caFile)
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("relay: CA file %s: %w", caFile, err)
		}
		return tlsca.Fingerprint(c), nil
	}
}
