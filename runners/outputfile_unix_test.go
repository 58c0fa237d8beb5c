//go:build unix

package runners

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// What the child leaves in its workdir is read as a bounded regular file
// only: a symlink (to a host file, to /dev/zero), a FIFO (whose read
// would block for good) or an oversize file fails the run, at once, as a
// DaemonError; nothing past the bound is read.
func TestReadOutcomeTakesOnlyBoundedRegularFiles(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("HOST-ONLY-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		plant  func(dir string) error
		exited error
	}{
		{"result symlinked to a host file", func(d string) error { return os.Symlink(secret, filepath.Join(d, ResultFile)) }, nil},
		{"error.json symlinked to /dev/zero", func(d string) error { return os.Symlink("/dev/zero", filepath.Join(d, ErrorFile)) }, errors.New("exit status 1")},
		{"result a FIFO", func(d string) error { return syscall.Mkfifo(filepath.Join(d, ResultFile), 0o600) }, nil},
		{"error.json a FIFO", func(d string) error { return syscall.Mkfifo(filepath.Join(d, ErrorFile), 0o600) }, errors.New("exit status 1")},
		{"error.json over its bound", func(d string) error {
			return os.WriteFile(filepath.Join(d, ErrorFile), []byte(`{"type":"E","message":"`+strings.Repeat("m", MaxErrorFileBytes)+`"}`), 0o600)
		}, errors.New("exit status 1")},
		{"result over what an ack holds", func(d string) error {
			return os.WriteFile(filepath.Join(d, ResultFile), make([]byte, MaxResultBytes+1), 0o600)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.plant(dir); err != nil {
				t.Fatal(err)
			}
			done := make(chan Outcome, 1)
			go func() { done <- ReadOutcome(dir, tc.exited) }()
			select {
			case o := <-done:
				if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon || strings.Contains(string(o.ResultBlob), "SECRET") {
					t.Fatalf("outcome %+v", o)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("reading the outcome blocked")
			}
		})
	}
}

// A child's error type that a plane would refuse in an ack (too long, a
// control character) is made one it takes; the message keeps it whole.
func TestSurfaceErrorTypeFitsAnAck(t *testing.T) {
	for _, typ := range []string{strings.Repeat("é", 200), "Value\nError", "Bad\tType"} {
		info := SurfaceError(typ, "m", nil)
		a := wire.Ack{InvocationID: "i1", State: wire.StateFailed, Error: info}
		if v := a.Validate(); v != nil {
			t.Errorf("type %q: ack refused: %+v", typ, v)
		}
		if !strings.HasPrefix(info.Message, typ+": ") {
			t.Errorf("type %q: message %q", typ, info.Message)
		}
	}
	if got := SurfaceError("ValueError", "m", nil).TypeName; got != "ValueError" {
		t.Errorf("a plain type became %q", got)
	}
}
