package daemon

import (
	"errors"

	"github.com/nymphd/nymph/wirecore/wire"
)

// The refusals of CheckOTA.
var (
	// ErrOTASHA256 is an ota_update whose sha256 is not wire.ValidSHA256's
	// form: the binary it names could never be verified.
	ErrOTASHA256 = errors.New("sha256 is not 64 hex characters")
	// ErrOTASameVersion is an ota_update to the running version: there is
	// nothing to do, which is no failure.
	ErrOTASameVersion = errors.New("the update is to the running version")
)

// CheckOTA returns why a daemon running version running must not fetch
// update, or nil. The machine applies it to the command before it asks
// for a download (StartOTA), and the host's updater (hostio/selfupdate)
// again before its own, since it can also be driven without the machine:
// one rule, so neither fetches what the other would refuse. A malformed
// sha256 comes first, so a broken command is reported as broken even when
// it names the running version.
func CheckOTA(update wire.OTAUpdate, running string) error {
	switch {
	case !wire.ValidSHA256(update.SHA256):
		return ErrOTASHA256
	case update.Version == running:
		return ErrOTASameVersion
	}
	return nil
}
