package sim

import (
	"bytes"
	"testing"
	"time"
)

func small() Scenario {
	sc := Default()
	sc.Name = "small"
	sc.Daemons = 50
	sc.Duration = 5 * time.Minute
	sc.Workload.ExecRate = 2
	return sc
}

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

func TestSmoke(t *testing.T) {
	res, csv := run(t, small())
	var sum bytes.Buffer
	res.WriteSummary(&sum)
	t.Logf("\n%s\n%s", sum.String(), csv)
}

func outage(noJitter bool) Scenario {
	sc := Default()
	sc.Name = "outage"
	sc.Daemons = 1000
	sc.Duration = 12 * time.Minute
	sc.SampleEvery = 5 * time.Second
	sc.Daemon.NoJitter = noJitter
	sc.Network.Outages = []Window{{At: 2 * time.Minute, For: 5 * time.Minute}}
	return sc
}

func TestOutageProbe(t *testing.T) {
	for _, nj := range []bool{false, true} {
		res, _ := run(t, outage(nj))
		var sum bytes.Buffer
		res.WriteSummary(&sum)
		t.Logf("nojitter=%v\n%s", nj, sum.String())
	}
}
