package relay

import (
	"fmt"

	"github.com/nymphd/nymph/hostio/tlsca"
)

// PrefixReport is what InspectPrefix finds in a prefix, judged by the
// rules the relay itself applies when it pumps one (nymph relay doctor).
type PrefixReport struct {
	// Path is the prefix, absolute with symlinks resolved.
	Path string
	// Machines counts the machine directories the relay would watch.
	Machines int
	// Pairs counts the complete pipe pairs it would pump; each holds one
	// or two descriptors (see FileBudget).
	Pairs int
	// Spools counts the machine directories with a spool directory.
	Spools int
	// Problems name each directory or pipe the relay would refuse or
	// leave unpumped and why ("PATH: why"), sorted by path.
	Problems []string
}

// FileLimitFor is the smallest open-file limit whose pipe budget holds
// both pipes of pairs pairs: pipeBudget solved for the limit, about
// (2 × pairs + 256) × 4/3 (the least L with L − ⌊L/4⌋ ≥ that need).
func FileLimitFor(pairs int64) int64 {
	need := 2*pairs + reservedFDs
	return 4*(need-1)/3 + 1
}

// CAFingerprint is the fingerprint of the first certificate in the CA
// file, as the relay writes it into relay-upstream.json ("" for none:
// the system's roots).
func CAFingerprint(caFile string) (string, error) { return caFingerprint(caFile) }

// caFingerprint is the fingerprint of the first certificate in the CA
// file, "" without one (the system's roots).
func caFingerprint(caFile string) (string, error) {
	if caFile == "" {
		return "", nil
	}
	certs, err := tlsca.ReadCAFile(caFile)
	if err != nil {
		return "", fmt.Errorf("relay: %w", err)
	}
	return tlsca.Fingerprint(certs[0]), nil
}
