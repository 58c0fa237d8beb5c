package sim

import "time"

// Mixed is a scenario that touches most of the model in well under a
// second: boots, execs, setups, a burst, an outage, a loud partition, a
// hibernate wave and a drain, over a lossy network. The tests of every
// driver run it.
func Mixed() Scenario {
	sc := Default()
	sc.Name = "mixed"
	sc.Daemons = 40
	sc.Duration = 6 * time.Minute
	sc.Network.Loss = 0.002
	sc.Network.Outages = []Window{{At: 2 * time.Minute, For: 30 * time.Second}}
	sc.Network.Partitions = []Partition{{At: 3 * time.Minute, For: 40 * time.Second, Fraction: 0.25, Refuse: true}}
	sc.Workload.ExecRate = 2
	sc.Workload.SetupRate = 0.05
	sc.Workload.Bursts = []Burst{{At: 90 * time.Second, For: 10 * time.Second, Rate: 40}}
	sc.Workload.Hibernates = []Wave{{At: 4 * time.Minute, For: time.Minute, Fraction: 0.2}}
	sc.Workload.Drains = []Wave{{At: 5 * time.Minute, Fraction: 0.1}}
	return sc
}

// Steady is the scale benchmark's fleet: n daemons for an hour, each
// taking an exec about every eight minutes.
func Steady(n int) Scenario {
	sc := Default()
	sc.Name = "steady"
	sc.Daemons = n
	sc.Duration = time.Hour
	sc.SampleEvery = 10 * time.Second
	sc.TickEvery = 10 * time.Second
	sc.BootSpread = time.Minute
	sc.Workload.ExecRate = float64(n) / 500
	return sc
}
