// Package simscenario reads the scenario files of `nymph sim`: TOML,
// strict (an unknown key is named and refused), every value checked, and
// laid over sim.Default so a file says only what it changes. The shipped
// scenarios are embedded, so `nymph sim --scenario steady` needs no file.
package simscenario

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nymphd/nymph/wirecore/sim"
	"github.com/pelletier/go-toml/v2"
)

//go:embed scenarios/*.toml
var shipped embed.FS

// Names lists the shipped scenarios, sorted.
func Names() []string {
	entries, err := fs.ReadDir(shipped, "scenarios")
	if err != nil {
		return nil // the embedded directory is always there
	}
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".toml"))
	}
	slices.Sort(out)
	return out
}

// Load reads a shipped scenario by name, or else the file at nameOrPath.
func Load(nameOrPath string) (sim.Scenario, error) {
	if !strings.ContainsAny(nameOrPath, `/\`) && !strings.HasSuffix(nameOrPath, ".toml") {
		data, err := shipped.ReadFile(path.Join("scenarios", nameOrPath+".toml"))
		if err != nil {
			return sim.Scenario{}, fmt.Errorf("load scenario %q: no such shipped scenario (shipped: %s; or give a file path)",
				nameOrPath, strings.Join(Names(), ", "))
		}
		return Parse(nameOrPath, data)
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return sim.Scenario{}, fmt.Errorf("load scenario: %w", err)
	}
	return Parse(strings.TrimSuffix(path.Base(nameOrPath), ".toml"), data)
}

// duration is a TOML string such as "1h30m" or "250ms".
type duration time.Duration

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (say \"90s\", \"5m\", \"250ms\")", b)
	}
	*d = duration(v)
	return nil
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func setDur(dst *time.Duration, v *duration) {
	if v != nil {
		*dst = time.Duration(*v)
	}
}

type file struct {
	Name        *string    `toml:"name"`
	Seed        *uint64    `toml:"seed"`
	Daemons     *int       `toml:"daemons"`
	Duration    *duration  `toml:"duration"`
	SampleEvery *duration  `toml:"sample_every"`
	TickEvery   *duration  `toml:"tick_every"`
	BootSpread  *duration  `toml:"boot_spread"`
	Daemon      daemonFile `toml:"daemon"`
	Plane       struct {
		PollCap *duration `toml:"poll_cap"`
		Retain  *duration `toml:"retain"`
	} `toml:"plane"`
	Network  networkFile  `toml:"network"`
	Workload workloadFile `toml:"workload"`
}

type daemonFile struct {
	WaitMax        *duration `toml:"wait_max"`
	RetryMin       *duration `toml:"retry_min"`
	RetryMax       *duration `toml:"retry_max"`
	MaxInvocations *int      `toml:"max_invocations"`
	Grace          *duration `toml:"grace"`
	Jitter         *bool     `toml:"jitter"`
	Extensions     *bool     `toml:"extensions"`
}

type distFile struct {
	Kind  *string   `toml:"kind"`
	Mean  *duration `toml:"mean"`
	Min   *duration `toml:"min"`
	Max   *duration `toml:"max"`
	Sigma *float64  `toml:"sigma"`
}

func (f *distFile) apply(d *sim.Dist) {
	if f == nil {
		return
	}
	set(&d.Kind, f.Kind)
	setDur(&d.Mean, f.Mean)
	setDur(&d.Min, f.Min)
	setDur(&d.Max, f.Max)
	set(&d.Sigma, f.Sigma)
}

type networkFile struct {
	Latency    *distFile `toml:"latency"`
	Loss       *float64  `toml:"loss"`
	Timeout    *duration `toml:"timeout"`
	Partitions []struct {
		At       duration `toml:"at"`
		For      duration `toml:"for"`
		Fraction float64  `toml:"fraction"`
		Refuse   bool     `toml:"refuse"`
	} `toml:"partitions"`
	Outages []struct {
		At  duration `toml:"at"`
		For duration `toml:"for"`
	} `toml:"outages"`
}

type waveFile struct {
	At       duration `toml:"at"`
	For      duration `toml:"for"`
	Fraction float64  `toml:"fraction"`
}

type workloadFile struct {
	ExecRate      *float64  `toml:"exec_rate"`
	ExecDuration  *distFile `toml:"exec_duration"`
	SetupRate     *float64  `toml:"setup_rate"`
	SetupDuration *distFile `toml:"setup_duration"`
	Bursts        []struct {
		At   duration `toml:"at"`
		For  duration `toml:"for"`
		Rate float64  `toml:"rate"`
	} `toml:"bursts"`
	Hibernates []waveFile `toml:"hibernates"`
	Drains     []struct {
		At       duration `toml:"at"`
		Fraction float64  `toml:"fraction"`
	} `toml:"drains"`
}

// Parse decodes one scenario file (name is its default name) and checks
// it.
func Parse(name string, data []byte) (sim.Scenario, error) {
	var f file
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return sim.Scenario{}, fmt.Errorf("parse scenario %s: %w", name, describe(err))
	}
	sc := sim.Default()
	sc.Name = name
	set(&sc.Name, f.Name)
	set(&sc.Seed, f.Seed)
	set(&sc.Daemons, f.Daemons)
	setDur(&sc.Duration, f.Duration)
	setDur(&sc.SampleEvery, f.SampleEvery)
	setDur(&sc.TickEvery, f.TickEvery)
	setDur(&sc.BootSpread, f.BootSpread)

	d := &sc.Daemon
	setDur(&d.WaitMax, f.Daemon.WaitMax)
	setDur(&d.RetryMin, f.Daemon.RetryMin)
	setDur(&d.RetryMax, f.Daemon.RetryMax)
	set(&d.MaxInvocations, f.Daemon.MaxInvocations)
	setDur(&d.Grace, f.Daemon.Grace)
	if f.Daemon.Jitter != nil {
		d.NoJitter = !*f.Daemon.Jitter
	}
	if f.Daemon.Extensions != nil {
		d.PlainProtocol = !*f.Daemon.Extensions
	}
	setDur(&sc.Plane.PollCap, f.Plane.PollCap)
	setDur(&sc.Plane.Retain, f.Plane.Retain)

	n := &sc.Network
	f.Network.Latency.apply(&n.Latency)
	set(&n.Loss, f.Network.Loss)
	setDur(&n.Timeout, f.Network.Timeout)
	for _, p := range f.Network.Partitions {
		n.Partitions = append(n.Partitions, sim.Partition{At: time.Duration(p.At), For: time.Duration(p.For), Fraction: p.Fraction, Refuse: p.Refuse})
	}
	for _, o := range f.Network.Outages {
		n.Outages = append(n.Outages, sim.Window{At: time.Duration(o.At), For: time.Duration(o.For)})
	}

	w := &sc.Workload
	set(&w.ExecRate, f.Workload.ExecRate)
	f.Workload.ExecDuration.apply(&w.ExecDuration)
	set(&w.SetupRate, f.Workload.SetupRate)
	f.Workload.SetupDuration.apply(&w.SetupDuration)
	for _, b := range f.Workload.Bursts {
		w.Bursts = append(w.Bursts, sim.Burst{At: time.Duration(b.At), For: time.Duration(b.For), Rate: b.Rate})
	}
	for _, h := range f.Workload.Hibernates {
		w.Hibernates = append(w.Hibernates, sim.Wave{At: time.Duration(h.At), For: time.Duration(h.For), Fraction: h.Fraction})
	}
	for _, h := range f.Workload.Drains {
		w.Drains = append(w.Drains, sim.Wave{At: time.Duration(h.At), Fraction: h.Fraction})
	}
	if err := sc.Validate(); err != nil {
		return sim.Scenario{}, fmt.Errorf("check scenario %s: %w", name, err)
	}
	return sc, nil
}

// describe turns the decoder's errors into sentences that name the key.
func describe(err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		var keys []string
		for _, e := range strict.Errors {
			keys = append(keys, strings.Join(e.Key(), "."))
		}
		return fmt.Errorf("unknown key %s", strings.Join(keys, ", "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		key := strings.Join(de.Key(), ".")
		if key != "" {
			return fmt.Errorf("line %d, column %d, key %s: %s", row, col, key, de.Error())
		}
		return fmt.Errorf("line %d, column %d: %s", row, col, de.Error())
	}
	return err
}
