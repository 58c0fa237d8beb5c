// Package testbuild builds the runners' test entry program once per test
// binary, as a static executable other users and containers can run.
package testbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
