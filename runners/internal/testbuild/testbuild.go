// Package testbuild builds the runners' test entry program once per test
// binary, as a static executable other users and containers can run.
package testbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EntryPackage is the import path of the test entry program.
const EntryPackage = "github.com/nymphd/nymph/runners/internal/testentry"

// Entry builds the test entry program into dir and returns its path. The
// binary is static (CGO_ENABLED=0) and mode 0755.
func Entry(dir string) (string, error) {
	out := filepath.Join(dir, "testentry")
	// `go test` puts its own toolchain first on PATH.
	cmd := exec.Command("go", "build", "-o", out, EntryPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testbuild: go build %s: %w\n%s", EntryPackage, err, b)
	}
	if err := os.Chmod(out, 0o755); err != nil {
		return "", fmt.Errorf("testbuild: chmod %s: %w", out, err)
	}
	return out, nil
}

// Main builds the test entry program, stores its path in *entry and runs
// m's tests. The program lives in a world-readable directory, named after
// pattern as os.MkdirTemp names it, so a second user (as_user) or a
// container can run it; the directory is removed when the tests end.
func Main(m *testing.M, pattern string, entry *string) {
	dir, err := os.MkdirTemp("", pattern)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		*entry, err = Entry(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
