package testscripts

import (
	"os"
	"os/exec"
	"testing"
)

// crossTargets are the release platforms other than Linux (make release
// builds all five; see the README's "Releases"). One of each system: the
// other darwin architecture builds the same files.
var crossTargets = []struct{ goos, goarch string }{
	{"darwin", "arm64"},
	{"windows", "amd64"},
}

// TestCrossBuild builds the binary as make release does, static and
// CGO-free, for macOS and Windows, so code that only Linux has (pidfds,
// openat2, FIFOs, flock) stays behind its build constraints instead of
// breaking the release; and vets every package, tests included, there.
func TestCrossBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles nymph twice")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	for _, tg := range crossTargets {
		t.Run(tg.goos+"/"+tg.goarch, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(goBin, "build", "-o", os.DevNull, "./cmd/nymph")
			cmd.Dir = ".."
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+tg.goos, "GOARCH="+tg.goarch)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("GOOS=%s GOARCH=%s go build ./cmd/nymph: %v\n%s", tg.goos, tg.goarch, err, out)
			}
			// The tests too: a test file that uses a POSIX-only call
			// carries a unix build constraint.
			vet := exec.Command(goBin, "vet", "./...")
			vet.Dir = ".."
			vet.Env = cmd.Env
			if out, err := vet.CombinedOutput(); err != nil {
				t.Fatalf("GOOS=%s GOARCH=%s go vet ./...: %v\n%s", tg.goos, tg.goarch, err, out)
			}
		})
	}
}
