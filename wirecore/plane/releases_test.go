package plane

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

func sumLine(c byte, name string) string { return strings.Repeat(string(c), 64) + "  " + name + "\n" }

func TestReleaseFor(t *testing.T) {
	data := sumLine('a', "nymph-linux-amd64-1.2.0") + sumLine('b', "nymph-linux-amd64-1.10.0") +
		strings.Repeat("C", 64) + " *nymph-linux-arm64-1.2.0\n" + sumLine('d', "nymph-darwin-arm64-1.9.0") + "\n"
	sums, err := ParseReleaseSums([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	linux := wire.Versions{Kernel: str("Linux 6.1.0-18-amd64"), Arch: str("x86_64")}
	arm := wire.Versions{Kernel: str("Linux 6.1.0"), Arch: str("aarch64")}
	mac := wire.Versions{Kernel: str("Darwin 23.1.0"), Arch: str("arm64")}
	risc := wire.Versions{Kernel: str("Linux 6.1.0"), Arch: str("riscv64")}
	for _, tc := range []struct {
		name    string
		v       wire.Versions
		version string
		want    Release
		err     string
	}{
		{"latest compares numerically", linux, "", Release{"nymph-linux-amd64-1.10.0", "1.10.0", strings.Repeat("b", 64)}, ""},
		{"a named version", linux, "1.2.0", Release{"nymph-linux-amd64-1.2.0", "1.2.0", strings.Repeat("a", 64)}, ""},
		{"uname's aarch64, the binary mode star, upper-case hex", arm, "", Release{"nymph-linux-arm64-1.2.0", "1.2.0", strings.Repeat("c", 64)}, ""},
		{"darwin", mac, "", Release{"nymph-darwin-arm64-1.9.0", "1.9.0", strings.Repeat("d", 64)}, ""},
		{"no such version", linux, "9.9.9", Release{}, "no release for linux/amd64 at version 9.9.9"},
		{"no binary for the platform", risc, "", Release{}, "no release for linux/riscv64"},
		{"no platform reported", wire.Versions{}, "", Release{}, "no release for the worker's platform"},
	} {
		got, err := ReleaseFor(sums, tc.v, tc.version)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: ReleaseFor = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"abc  nymph\n", sumLine('a', "../etc/passwd"), strings.Repeat("a", 64) + "\n"} {
		if _, err := ParseReleaseSums([]byte(bad)); err == nil {
			t.Errorf("ParseReleaseSums(%q) took it", bad)
		}
	}
}

// A worker sent an update says how it came back on its next hello: with
// the version (updated), or without it (refused or rolled back); a worker
// with no update pending says nothing.
func TestUpdateOutcome(t *testing.T) {
	p := New(Config{Entropy: rand.NewChaCha8([32]byte{2})})
	now := time.Unix(1_700_000_000, 0)
	one, old, next := "1", "1.0.0", "2.0.0"
	hello := func(req RequestID, version *string) *UpdateOutcome {
		t.Helper()
		body := wire.HelloRequest{MachineID: "m1", Label: "m1", Tags: []string{}, Capabilities: wire.Capabilities{Runners: []string{"process"}},
			Versions: wire.Versions{Daemon: version, Protocol: &one}}
		eff := p.Step(now, Hello{Auth: Auth{Bearer: true}, Req: req, Body: body})
		r, ok := eff[len(eff)-1].(Reply)
		if !ok || r.Status != StatusOK {
			t.Fatalf("hello: %+v", eff)
		}
		return r.Update
	}
	if u := hello(1, &old); u != nil {
		t.Fatalf("first hello: update outcome %+v", u)
	}
	id := p.workerOrder[0].ID()
	update := func(req RequestID) {
		t.Helper()
		eff := p.Step(now, EnqueueUpdate{Req: req, WorkerID: id, Body: operator.UpdateRequest{Version: next, URL: "https://plane.example/v1/releases/x", SHA256: strings.Repeat("a", 64)}})
		if r := eff[len(eff)-1].(Reply); r.Status != StatusOK {
			t.Fatalf("update: %+v", r)
		}
	}
	update(2)
	if u := hello(3, &old); u == nil || *u != (UpdateOutcome{WorkerID: id, Running: old, Target: next}) {
		t.Errorf("hello on the old version: %+v", u)
	}
	if u := hello(4, &next); u == nil || *u != (UpdateOutcome{WorkerID: id, Running: next, Target: next}) {
		t.Errorf("hello on the new version: %+v", u)
	}
	if u := hello(5, &next); u != nil {
		t.Errorf("a hello after the update was reported: %+v", u)
	}
}
