package simscenario

import (
	"strings"
	"testing"
	"time"
)

func TestShippedScenariosLoad(t *testing.T) {
	names := Names()
	want := []string{"exec-storm", "hibernate-wave", "outage", "outage-nojitter", "relay-loss", "steady"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("shipped %v, want %v", names, want)
	}
	for _, n := range names {
		sc, err := Load(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if sc.Name != n {
			t.Errorf("%s: named %q", n, sc.Name)
		}
	}
	sc, _ := Load("outage-nojitter")
	if !sc.Daemon.NoJitter || len(sc.Network.Outages) != 1 || sc.Network.Outages[0].For != 5*time.Minute {
		t.Errorf("outage-nojitter: %+v", sc)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	cases := []struct{ src, want string }{
		{"daemons = 10\nfoo = 1\n", "unknown key foo"},
		{"[network]\nlatncy = 1\n", "unknown key network.latncy"},
		{"duration = \"ten\"\n", "duration"},
		{"daemons = 0\n", "daemons 0"},
		{"[network]\nloss = 1.5\n", "network.loss"},
		{"[workload.exec_duration]\nkind = \"zipf\"\n", "workload.exec_duration.kind"},
		{"[[workload.hibernates]]\nat = \"1m\"\nfraction = 2.0\nfor = \"1m\"\n", "workload.hibernates[0]"},
		{"daemons = \"many\"\n", "daemons"},
	}
	for _, c := range cases {
		_, err := Parse("t", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to name %q", c.src, err, c.want)
		}
	}
}

func TestParseOverlaysDefaults(t *testing.T) {
	sc, err := Parse("x", []byte("daemons = 7\n[daemon]\nretry_max = \"2m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Daemons != 7 || sc.Daemon.RetryMax != 2*time.Minute || sc.Daemon.RetryMin != time.Second || sc.Name != "x" {
		t.Errorf("got %+v", sc)
	}
}
