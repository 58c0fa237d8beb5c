package testscripts

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMakeRelease runs the repository's `make release` for this host's
// own platform only (the five cross builds take minutes) into a temporary
// DIST, and checks the binary's name, that it runs and says the VERSION
// it was built with, and that SHA256SUMS is sha256sum's format and right.
func TestMakeRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nymph once more, with -trimpath")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum not installed (the release target writes SHA256SUMS with it)")
	}
	dist := t.TempDir()
	const version = "9.8.7-releasetest"
	platform := runtime.GOOS + "/" + runtime.GOARCH
	mk := exec.Command("make", "-C", "..", "release", "VERSION="+version, "DIST="+dist, "PLATFORMS="+platform)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	name := "nymph-" + runtime.GOOS + "-" + runtime.GOARCH + "-" + version
	bin := filepath.Join(dist, name)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", name, err, out)
	}
	if !strings.HasPrefix(string(out), "nymph "+version+" ") {
		t.Errorf("%s version printed %q, want the VERSION %s", name, out, version)
	}

	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sha256sum's format: 64 hex digits, two spaces (or " *"), the name.
		line := sc.Text()
		if len(line) < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*') {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's format", line)
		}
		sums[line[66:]] = line[:64]
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if got := sums[name]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("SHA256SUMS has %q for %s, the file's sha256 is %x", got, name, sum)
	}
	if len(sums) != 1 {
		t.Errorf("SHA256SUMS lists %d files, want 1: %v", len(sums), sums)
	}
	entries, _ := os.ReadDir(dist)
	for _, e := range entries {
		if e.Name() != name && e.Name() != "SHA256SUMS" {
			t.Errorf("%s left in DIST", e.Name())
		}
	}
	// CGO-free: a static binary (on Linux, no program interpreter).
	if runtime.GOOS == "linux" {
		if file, err := exec.Command("file", bin).Output(); err == nil && !strings.Contains(string(file), "statically linked") {
			t.Errorf("not a static binary: %s", file)
		}
	}
}

// TestInstallScript runs testdata/install_sh.txtar against the
// repository's install.sh (TestScripts, which cannot name it, skips it).
func TestInstallScript(t *testing.T) {
	installSh, err := filepath.Abs(filepath.Join("..", "install.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"sh", "awk", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	testscript.Run(t, testscript.Params{
		Files: []string{filepath.Join("testdata", "install_sh.txtar")},
		Setup: func(env *testscript.Env) error {
			env.Setenv("INSTALL_SH", installSh)
			env.Setenv("NYMPH_INSTALL_SH_TEST", "1")
			return nil
		},
		Condition: func(cond string) (bool, error) {
			if cond == "env:NYMPH_INSTALL_SH_TEST" {
				return true, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
}

// TestInstallScriptShellcheck keeps install.sh POSIX and clean.
func TestInstallScriptShellcheck(t *testing.T) {
	tool, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck not installed")
	}
	if out, err := exec.Command(tool, "--shell=sh", filepath.Join("..", "install.sh")).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck install.sh: %v\n%s", err, out)
	}
}
