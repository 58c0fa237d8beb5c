package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// CheckOTA refuses a broken command (malformed sha256, no version, no url)
// before it looks at the running version, and takes a sha256 in either
// case.
func TestCheckOTA(t *testing.T) {
	sha := strings.Repeat("0123456789abcdef", 4)
	url := "https://r.example/nymph"
	for _, tc := range []struct {
		name   string
		update wire.OTAUpdate
		want   error
	}{
		{"new version", wire.OTAUpdate{Version: "0.4.0", URL: url, SHA256: sha}, nil},
		{"upper-case sha256", wire.OTAUpdate{Version: "0.4.0", URL: url, SHA256: strings.ToUpper(sha)}, nil},
		{"running version", wire.OTAUpdate{Version: "0.3.0", URL: url, SHA256: sha}, wire.ErrOTASameVersion},
		{"short sha256", wire.OTAUpdate{Version: "0.4.0", URL: url, SHA256: "deadbeef"}, wire.ErrOTASHA256},
		{"non-hex sha256", wire.OTAUpdate{Version: "0.4.0", URL: url, SHA256: strings.Repeat("g", 64)}, wire.ErrOTASHA256},
		{"bad sha256 to the running version", wire.OTAUpdate{Version: "0.3.0", URL: url, SHA256: "deadbeef"}, wire.ErrOTASHA256},
		{"bad sha256 and no url", wire.OTAUpdate{Version: "0.4.0", SHA256: "deadbeef"}, wire.ErrOTASHA256},
		{"no version", wire.OTAUpdate{URL: url, SHA256: sha}, wire.ErrOTANoVersion},
		{"no version, no url", wire.OTAUpdate{SHA256: sha}, wire.ErrOTANoVersion},
		{"no url", wire.OTAUpdate{Version: "0.4.0", SHA256: sha}, wire.ErrOTANoURL},
		{"no url to the running version", wire.OTAUpdate{Version: "0.3.0", SHA256: sha}, wire.ErrOTANoURL},
	} {
		if err := wire.CheckOTA(tc.update, "0.3.0"); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: CheckOTA = %v, want %v", tc.name, err, tc.want)
		}
	}
}
