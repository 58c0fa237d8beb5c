package relay

import (
	"errors"
	"testing"
)

func TestRelayRefusesWithoutPOSIX(t *testing.T) {
	if _, err := New(Config{Prefix: t.TempDir()}); !errors.Is(err, errNeedsPOSIX) {
		t.Errorf("New = %v, want errNeedsPOSIX", err)
	}
	if _, err := InspectPrefix(t.TempDir(), false); !errors.Is(err, errNeedsPOSIX) {
		t.Errorf("InspectPrefix = %v, want errNeedsPOSIX", err)
	}
}
