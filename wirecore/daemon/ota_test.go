package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// CheckOTA refuses a malformed sha256 before it looks at the version, and
// takes a sha256 in either case.
func TestCheckOTA(t *testing.T) {
	sha := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name   string
		update wire.OTAUpdate
		want   error
	}{
		{"new version", wire.OTAUpdate{Version: "0.4.0", URL: "https://r.example/nymph", SHA256: sha}, nil},
		{"upper-case sha256", wire.OTAUpdate{Version: "0.4.0", SHA256: strings.ToUpper(sha)}, nil},
		{"running version", wire.OTAUpdate{Version: "0.3.0", SHA256: sha}, ErrOTASameVersion},
		{"short sha256", wire.OTAUpdate{Version: "0.4.0", SHA256: "deadbeef"}, ErrOTASHA256},
		{"non-hex sha256", wire.OTAUpdate{Version: "0.4.0", SHA256: strings.Repeat("g", 64)}, ErrOTASHA256},
		{"bad sha256 to the running version", wire.OTAUpdate{Version: "0.3.0", SHA256: "deadbeef"}, ErrOTASHA256},
	} {
		if err := CheckOTA(tc.update, "0.3.0"); !errors.Is(err, tc.want) {
			t.Errorf("%s: CheckOTA = %v, want %v", tc.name, err, tc.want)
		}
	}
}
