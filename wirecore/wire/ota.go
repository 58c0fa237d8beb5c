package wire

import "errors"

// The refusals of CheckOTA.
var (
	// ErrOTASHA256 is an ota_update whose sha256 is not ValidSHA256's form:
	// the binary it names could never be verified.
	ErrOTASHA256 = errors.New("sha256 is not 64 hex characters")
	// ErrOTANoVersion is an ota_update with no version: nothing would say
	// whether the binary it installs is the one asked for.
	ErrOTANoVersion = errors.New("version is empty")
	// ErrOTANoURL is an ota_update with no url: there is nothing to fetch.
	ErrOTANoURL = errors.New("url is empty")
	// ErrOTASameVersion is an ota_update to the running version: there is
	// nothing to do, which is no failure.
	ErrOTASameVersion = errors.New("the update is to the running version")
)

// CheckOTA returns why a daemon running version running must not fetch
// update, or nil. The daemon's machine applies it to the command before it
// asks for a download, and the host's updater again before its own, since
// it can also be driven without the machine: one rule, so neither fetches
// what the other would refuse. A broken command (a malformed sha256, no
// version, no url, in that order) is reported as broken even when it names
// the running version, so a plane that sends one hears of it.
func CheckOTA(update OTAUpdate, running string) error {
	switch {
	case !ValidSHA256(update.SHA256):
		return ErrOTASHA256
	case update.Version == "":
		return ErrOTANoVersion
	case update.URL == "":
		return ErrOTANoURL
	case update.Version == running:
		return ErrOTASameVersion
	}
	return nil
}
