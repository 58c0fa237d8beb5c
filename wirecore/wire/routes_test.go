package wire_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

func TestParameterisedRoutes(t *testing.T) {
	for got, want := range map[string]string{
		wire.PathExecResult("ex_01"): "/v1/daemon/exec/ex_01/result",
		wire.PathExecChunk("ex_01"):  "/v1/daemon/exec/ex_01/chunk",
		wire.PathPresign("jobs"):     "/v1/namespaces/jobs/payloads/presign",
		wire.PathExecResult("a/b"):   "/v1/daemon/exec/a%2Fb/result", // an id never adds a segment
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	for _, p := range wire.DaemonRoutes {
		if !strings.HasPrefix(p, "/v1/daemon/") || strings.Count(p, "/") != 3 {
			t.Errorf("daemon route %q is not a fixed /v1/daemon/NAME route", p)
		}
	}
	if id := wire.SetupInvocationID("c1"); id != "setup-c1" {
		t.Errorf("SetupInvocationID(c1) = %q", id)
	}
	if c, ok := wire.SetupCommandID("setup-c1"); !ok || c != "c1" {
		t.Errorf("SetupCommandID(setup-c1) = %q, %v", c, ok)
	}
	if _, ok := wire.SetupCommandID("inv-1"); ok {
		t.Error("inv-1 taken for a setup's invocation")
	}
}

func TestValidSHA256BothSides(t *testing.T) {
	hex64 := strings.Repeat("aB3", 21) + "f"
	for s, want := range map[string]bool{
		hex64:                         true,
		hex64[:63]:                    false,
		hex64 + "0":                   false,
		hex64[:63] + "g":              false,
		"":                            false,
		strings.Repeat("0", 63) + " ": false,
	} {
		if got := wire.ValidSHA256(s); got != want {
			t.Errorf("ValidSHA256(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestEpochTime(t *testing.T) {
	cases := []struct {
		s    float64
		want time.Time
	}{
		{1.5, time.Unix(1, 5e8).UTC()},
		{0, time.Unix(0, 0).UTC()},
		{-3, time.Unix(0, 0).UTC()},
		{math.NaN(), time.Unix(0, 0).UTC()},
		{math.Inf(1), time.Unix(wire.MaxEpochS, 0).UTC()},
		{wire.MaxEpochS, time.Unix(wire.MaxEpochS, 0).UTC()},
		{wire.MaxEpochS * 10, time.Unix(wire.MaxEpochS, 0).UTC()},
	}
	for _, c := range cases {
		if got := wire.EpochTime(c.s); !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("EpochTime(%g) = %v, want %v", c.s, got, c.want)
		}
	}
	at := time.Unix(1767225600, 123456000)
	// A float64 of today's epoch seconds resolves about 0.24 µs.
	if back := wire.EpochTime(wire.EpochSeconds(at)); back.Sub(at).Abs() >= time.Microsecond {
		t.Errorf("EpochSeconds then EpochTime: %v, want %v within 1µs", back, at)
	}
	if wire.EpochSeconds(time.Time{}) != 0 {
		t.Error("the zero time is not 0")
	}
}

func TestRunnerKind(t *testing.T) {
	for name, want := range map[string]string{
		"process": "process", "subprocess": "process", "docker": "docker", "gvisor": "gvisor",
		"slurm": "slurm", "kube": "kube", "mock": "mock",
		"": "", "Docker": "", "lambda": "", "Subprocess": "",
	} {
		kind, ok := wire.RunnerKind(name)
		if kind != want || ok != (want != "") {
			t.Errorf("RunnerKind(%q) = %q, %v; want %q", name, kind, ok, want)
		}
	}
}
