package sim

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/small.csv from this run")

func run(t testing.TB, sc Scenario) (Result, []byte) {
	t.Helper()
	s, err := New(sc)
	if err != nil {
		t.Fatal(err)
	}
	res := s.Run(nil)
	var buf bytes.Buffer
	if err := res.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	return res, buf.Bytes()
}

// TestDeterministic: the same scenario and seed give the same CSV byte
// for byte; another seed gives another.
func TestDeterministic(t *testing.T) {
	res, a := run(t, Mixed())
	_, b := run(t, Mixed())
	if !bytes.Equal(a, b) {
		t.Fatal("two runs of the same scenario and seed differ")
	}
	other := Mixed()
	other.Seed = 2
	if _, c := run(t, other); bytes.Equal(a, c) {
		t.Fatal("seed 2 gave the same CSV as seed 1")
	}
	s := res.Summary
	if s.Completed == 0 || s.Refused == 0 || s.Exits == 0 || s.Requests[RouteHello] < 40 {
		t.Errorf("the scenario did not exercise the model: %+v", s)
	}
}

// TestGolden pins the small scenario's CSV. `make test-js` runs it under
// js/wasm too, so the native and the wasm build must give the same bytes.
// After a deliberate change to the model or the cores: go test -update.
func TestGolden(t *testing.T) {
	_, got := run(t, Mixed())
	path := filepath.Join("testdata", "small.csv")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("CSV differs from %s (run with -update after a deliberate change)\ngot:\n%s", path, got)
	}
}

func outage(noJitter bool) Scenario {
	sc := Default()
	sc.Name = "outage"
	sc.Daemons = 300
	sc.Duration = 10 * time.Minute
	sc.SampleEvery = time.Second
	sc.Daemon.NoJitter = noJitter
	sc.Network.Outages = []Window{{At: 2 * time.Minute, For: 5 * time.Minute}}
	return sc
}

// TestOutageHerd: after a five-minute outage the fleet comes back; with
// the jitter off it comes back in lockstep, and the plane's peak request
// rate after the outage is several times what full jitter gives.
func TestOutageHerd(t *testing.T) {
	peakAfter := func(res Result) float64 {
		var peak float64
		for _, r := range res.Rows {
			if r.T > 7*time.Minute {
				peak = max(peak, r.Requests())
			}
		}
		return peak
	}
	jitter, _ := run(t, outage(false))
	lockstep, _ := run(t, outage(true))
	pj, pl := peakAfter(jitter), peakAfter(lockstep)
	t.Logf("peak plane requests/s after the outage: %.0f with jitter, %.0f without", pj, pl)
	if pl < 3*pj {
		t.Errorf("peak without jitter %.0f/s is not well above %.0f/s with it", pl, pj)
	}
	if got := lockstep.Summary.PeakBack; got != 300 {
		t.Errorf("%d daemons in backoff at the peak, want the whole fleet", got)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	sc := Default()
	sc.Network.Loss = 1
	sc.Workload.ExecDuration.Kind = "zipf"
	for i := range MaxScheduled + 1 { // one more than an event can name
		sc.Network.Outages = append(sc.Network.Outages, Window{At: time.Duration(i) * time.Minute, For: time.Second})
	}
	_, err := New(sc)
	for _, want := range []string{"network.loss", "workload.exec_duration.kind", "at most 255 partitions, outages"} {
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
