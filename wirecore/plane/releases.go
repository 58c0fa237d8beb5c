package plane

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/nymphd/nymph/wirecore/wire"
)

// ReleaseSums is the file beside the binaries of a releases directory
// (serve --releases, make release): sha256sum's format, one
// "HEX  NAME" (or "HEX *NAME") a line.
const ReleaseSums = "SHA256SUMS"

// ReleaseName is the file name of the nymph binary for goos/goarch at
// version: nymph-{os}-{arch}-{version}, with Go's os and arch names.
func ReleaseName(goos, goarch, version string) string {
	return "nymph-" + goos + "-" + goarch + "-" + version
}

// ParseReleaseSums reads a SHA256SUMS file into name → lower-case sha256.
// A line that is not a sum and a name is an error naming its number.
func ParseReleaseSums(data []byte) (map[string]string, error) {
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimLeft(name, " "), "*")
		if !ok || !wire.ValidSHA256(sum) || name == "" || strings.ContainsAny(name, "/\\") {
			return nil, fmt.Errorf("%s line %d: want HEX  NAME, got %q", ReleaseSums, n, line)
		}
		sums[name] = strings.ToLower(sum)
	}
	return sums, sc.Err()
}

// Platform is a worker's Go os and arch, from the kernel (`uname -s`,
// the first word of versions.kernel) and arch (`uname -m`) it reported;
// ok is false when either is missing or not one nymph is built for.
func Platform(v wire.Versions) (goos, goarch string, ok bool) {
	if v.Kernel == nil || v.Arch == nil {
		return "", "", false
	}
	sys, _, _ := strings.Cut(strings.TrimSpace(*v.Kernel), " ")
	switch strings.ToLower(sys) {
	case "linux":
		goos = "linux"
	case "darwin":
		goos = "darwin"
	case "freebsd":
		goos = "freebsd"
	default:
		if strings.HasPrefix(strings.ToLower(sys), "mingw") || strings.HasPrefix(strings.ToLower(sys), "msys") ||
			strings.HasPrefix(strings.ToLower(sys), "cygwin") || strings.EqualFold(sys, "windows") {
			goos = "windows"
		}
	}
	switch strings.ToLower(strings.TrimSpace(*v.Arch)) {
	case "x86_64", "amd64":
		goarch = "amd64"
	case "aarch64", "arm64", "aarch64_be":
		goarch = "arm64"
	case "i386", "i686":
		goarch = "386"
	case "armv7l", "armv6l":
		goarch = "arm"
	case "riscv64":
		goarch = "riscv64"
	}
	return goos, goarch, goos != "" && goarch != ""
}

// LatestRelease is the highest version among the names in sums for
// goos/goarch ("" when none): versions compare by their dot- and
// dash-separated parts, numerically where both parts are numbers.
func LatestRelease(sums map[string]string, goos, goarch string) string {
	prefix := ReleaseName(goos, goarch, "")
	best := ""
	for name := range sums {
		v, ok := strings.CutPrefix(name, prefix)
		if !ok || v == "" {
			continue
		}
		if best == "" || compareVersions(v, best) > 0 {
			best = v
		}
	}
	return best
}

func compareVersions(a, b string) int {
	split := func(s string) []string {
		return strings.FieldsFunc(strings.TrimPrefix(s, "v"), func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	}
	pa, pb := split(a), split(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.ParseUint(pa[i], 10, 64)
		nb, eb := strconv.ParseUint(pb[i], 10, 64)
		switch {
		case ea == nil && eb == nil && na != nb:
			if na > nb {
				return 1
			}
			return -1
		case (ea != nil || eb != nil) && pa[i] != pb[i]:
			return strings.Compare(pa[i], pb[i])
		}
	}
	return len(pa) - len(pb)
}

// Release is one binary of a releases directory.
type Release struct {
	Name, Version, SHA256 string
}

// ReleaseFor is the release a worker with versions v gets at version
// ("" for the latest). The error says why there is none: "no release for
// linux/riscv64", or a platform nymph is not built for.
func ReleaseFor(sums map[string]string, v wire.Versions, version string) (Release, error) {
	goos, goarch, ok := Platform(v)
	if !ok {
		kernel, arch := "?", "?"
		if v.Kernel != nil {
			kernel = *v.Kernel
		}
		if v.Arch != nil {
			arch = *v.Arch
		}
		return Release{}, fmt.Errorf("no release for the worker's platform (kernel %q, arch %q)", kernel, arch)
	}
	if version == "" {
		if version = LatestRelease(sums, goos, goarch); version == "" {
			return Release{}, fmt.Errorf("no release for %s/%s", goos, goarch)
		}
	}
	name := ReleaseName(goos, goarch, version)
	sum, ok := sums[name]
	if !ok {
		return Release{}, fmt.Errorf("no release for %s/%s at version %s", goos, goarch, version)
	}
	return Release{Name: name, Version: version, SHA256: sum}, nil
}
