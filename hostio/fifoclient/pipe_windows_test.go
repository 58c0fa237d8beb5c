package fifoclient

import (
	"errors"
	"strings"
	"testing"
)

func TestNewRefusesWithoutPOSIX(t *testing.T) {
	_, err := New(Config{Dir: t.TempDir()})
	if !errors.Is(err, errNeedsPOSIX) || !strings.Contains(err.Error(), "POSIX") {
		t.Fatalf("New on Windows = %v, want the error that the fifo transport needs a POSIX system", err)
	}
}
