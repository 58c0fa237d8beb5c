package selfupdate

import (
	"errors"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

func TestCheckRefusesOnWindows(t *testing.T) {
	u, err := New(Options{Running: "1.0.0", ServerURL: "https://plane.example", Executable: `C:\nymph\nymph.exe`})
	if err != nil {
		t.Fatal(err)
	}
	up := wire.OTAUpdate{Version: "1.0.1", URL: "https://plane.example/v1/releases/x", SHA256: strings.Repeat("a", 64)}
	if err := u.Check(up); !errors.Is(err, errUnsupported) {
		t.Fatalf("Check = %v, want the error that updates are not supported on Windows", err)
	}
}
