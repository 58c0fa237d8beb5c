package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/plane"
)

// Scenario is everything a run depends on: with the same Scenario (Seed
// included) Run gives the same Result, byte for byte.
type Scenario struct {
	Name    string
	Seed    uint64
	Daemons int
	// Duration is how much virtual time the run covers.
	Duration time.Duration
	// SampleEvery is the width of one row of the time series.
	SampleEvery time.Duration
	// TickEvery is how often the plane gets its clock Tick (lost workers,
	// retention). `nymph serve` ticks every second; the plane's tick
	// sorts every parked poll, so a large fleet is simulated with a
	// coarser tick — deadlines do not depend on it (each Park has its
	// own PollDeadline event).
	TickEvery time.Duration
	// BootSpread spreads the daemons' boots uniformly over [0, BootSpread).
	BootSpread time.Duration

	Daemon   DaemonModel
	Plane    PlaneModel
	Network  NetworkModel
	Workload Workload
}

// DaemonModel is the daemons' configuration (all daemons share it).
type DaemonModel struct {
	WaitMax        time.Duration // [poll] wait_max_s
	RetryMin       time.Duration // [poll] retry_min_s
	RetryMax       time.Duration // [poll] retry_max_s
	MaxInvocations int           // [runtime] max_invocations
	Grace          time.Duration // [shutdown] grace_s
	// NoJitter feeds the backoff a jitter of zero: the daemons' retries
	// then follow the bare doubling schedule, in lockstep.
	NoJitter bool
	// PlainProtocol announces no extension ([server] extensions = false).
	PlainProtocol bool
}

// PlaneModel is the control plane's configuration.
type PlaneModel struct {
	PollCap time.Duration
	// Retain is how long finished execs are kept (plane.Config.Retain).
	Retain time.Duration
}

// NetworkModel is what lies between the daemons and the plane.
type NetworkModel struct {
	// Latency is one-way: a request takes one draw, its answer another.
	Latency Dist
	// Loss is the probability that a request or an answer is lost; the
	// client then learns nothing until its Timeout.
	Loss float64
	// Timeout is how long a client waits for an answer beyond what it
	// asked the plane to wait (a poll's timeout_s).
	Timeout    time.Duration
	Partitions []Partition
	Outages    []Window
}

// Partition cuts a fraction of the daemons off the plane: daemons
// [0, Fraction·N), the ones behind one relay.
type Partition struct {
	At, For  time.Duration
	Fraction float64
	// Refuse makes the cut loud (the relay is down: requests fail as
	// connection refused at once, open ones are reset) instead of silent
	// (packets vanish: clients wait out their timeouts).
	Refuse bool
}

// Window is a span of virtual time: a plane outage. During it every
// request fails as connection refused; at its start the plane drops every
// open request (the process went away) and at its end it is back with its
// state (restored from its store).
type Window struct {
	At, For time.Duration
}

// Workload is what operators do to the fleet.
type Workload struct {
	// ExecRate is fleet-wide exec arrivals per second (Poisson), each to
	// a uniformly chosen worker.
	ExecRate     float64
	ExecDuration Dist
	Bursts       []Burst
	// SetupRate is fleet-wide setup arrivals per second.
	SetupRate     float64
	SetupDuration Dist
	Hibernates    []Wave
	Drains        []Wave
}

// Burst raises the exec arrival rate to Rate during [At, At+For).
type Burst struct {
	At, For time.Duration
	Rate    float64
}

// Wave acts on a random Fraction of the daemons at At: a hibernate for
// For, or a drain (SIGTERM; For unused).
type Wave struct {
	At, For  time.Duration
	Fraction float64
}

// Dist is a distribution of durations.
type Dist struct {
	// Kind is "fixed" (Mean), "uniform" (Min..Max), "exponential" (Min +
	// an exponential of mean Mean-Min) or "lognormal" (median Mean, shape
	// Sigma, at least Min). Empty is fixed.
	Kind           string
	Mean, Min, Max time.Duration
	Sigma          float64
}

// Dist kinds.
const (
	DistFixed       = "fixed"
	DistUniform     = "uniform"
	DistExponential = "exponential"
	DistLognormal   = "lognormal"
)

// Validate names the first field that is out of range.
func (d Dist) Validate(name string) error {
	switch d.Kind {
	case "", DistFixed, DistExponential, DistLognormal:
	case DistUniform:
		if d.Max < d.Min {
			return fmt.Errorf("%s.max %s is below %s.min %s", name, d.Max, name, d.Min)
		}
	default:
		return fmt.Errorf("%s.kind %q is none of fixed, uniform, exponential, lognormal", name, d.Kind)
	}
	if d.Mean < 0 || d.Min < 0 || d.Max < 0 {
		return fmt.Errorf("%s: durations must not be negative", name)
	}
	if d.Kind == DistExponential && d.Mean < d.Min {
		return fmt.Errorf("%s.mean %s is below %s.min %s", name, d.Mean, name, d.Min)
	}
	if d.Sigma < 0 || math.IsNaN(d.Sigma) || d.Sigma > 10 {
		return fmt.Errorf("%s.sigma %v is outside [0, 10]", name, d.Sigma)
	}
	return nil
}

// draw returns one duration from d.
func (d Dist) draw(r *rand.Rand) int64 {
	switch d.Kind {
	case DistUniform:
		span := int64(d.Max - d.Min)
		if span <= 0 {
			return int64(d.Min)
		}
		return int64(d.Min) + r.Int64N(span+1)
	case DistExponential:
		return int64(d.Min) + int64(r.ExpFloat64()*float64(d.Mean-d.Min))
	case DistLognormal:
		v := float64(d.Mean) * math.Exp(d.Sigma*r.NormFloat64())
		return max(int64(d.Min), int64(min(v, float64(365*24*time.Hour))))
	}
	return int64(d.Mean)
}

// Default returns a Scenario with every default filled: a steady fleet of
// 100 daemons for ten minutes, no workload.
func Default() Scenario {
	return Scenario{
		Name:        "default",
		Seed:        1,
		Daemons:     100,
		Duration:    10 * time.Minute,
		SampleEvery: 10 * time.Second,
		TickEvery:   5 * time.Second,
		BootSpread:  20 * time.Second,
		// The daemons' and the plane's own defaults.
		Daemon: DaemonModel{
			WaitMax:        seconds(daemon.DefaultWaitMaxS),
			RetryMin:       seconds(daemon.DefaultRetryMinS),
			RetryMax:       seconds(daemon.DefaultRetryMaxS),
			MaxInvocations: daemon.DefaultMaxInvocations,
			Grace:          seconds(daemon.DefaultGraceS),
		},
		Plane: PlaneModel{PollCap: plane.DefaultPollCap, Retain: 10 * time.Minute},
		Network: NetworkModel{
			Latency: Dist{Kind: DistLognormal, Mean: 2 * time.Millisecond, Sigma: 0.5, Min: 200 * time.Microsecond},
			Timeout: 30 * time.Second,
		},
		Workload: Workload{
			ExecDuration:  Dist{Kind: DistExponential, Mean: 2 * time.Second, Min: 10 * time.Millisecond},
			SetupDuration: Dist{Kind: DistFixed, Mean: 5 * time.Second},
		},
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// MaxScheduled bounds each list of scheduled faults and waves: an event
// names its entry by a byte.
const MaxScheduled = 255

// MaxDaemons bounds Scenario.Daemons: ids and the heap use 32-bit indexes.
const MaxDaemons = 10_000_000

// Validate names the first field that is out of range.
func (s Scenario) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Daemons < 1 || s.Daemons > MaxDaemons {
		bad("daemons %d is outside [1, %d]", s.Daemons, MaxDaemons)
	}
	if s.Duration <= 0 {
		bad("duration %s must be positive", s.Duration)
	}
	if s.SampleEvery <= 0 {
		bad("sample_every %s must be positive", s.SampleEvery)
	} else if s.Duration/s.SampleEvery > 1_000_000 {
		bad("sample_every %s gives more than a million rows over %s", s.SampleEvery, s.Duration)
	}
	if s.TickEvery <= 0 {
		bad("tick_every %s must be positive", s.TickEvery)
	}
	if s.BootSpread < 0 {
		bad("boot_spread %s is negative", s.BootSpread)
	}
	d := s.Daemon
	if d.WaitMax <= 0 || d.RetryMin <= 0 || d.RetryMax < d.RetryMin {
		bad("daemon: wait_max and retry_min must be positive and retry_max at least retry_min")
	}
	if d.MaxInvocations < 0 {
		bad("daemon.max_invocations %d is negative", d.MaxInvocations)
	}
	if d.Grace < 0 {
		bad("daemon.grace %s is negative", d.Grace)
	}
	if s.Plane.PollCap <= 0 {
		bad("plane.poll_cap %s must be positive", s.Plane.PollCap)
	}
	if s.Plane.Retain < 0 {
		bad("plane.retain %s is negative", s.Plane.Retain)
	}
	n := s.Network
	if err := n.Latency.Validate("network.latency"); err != nil {
		errs = append(errs, err)
	}
	if !(n.Loss >= 0 && n.Loss < 1) {
		bad("network.loss %v is outside [0, 1)", n.Loss)
	}
	if n.Timeout <= 0 {
		bad("network.timeout %s must be positive", n.Timeout)
	}
	for i, p := range n.Partitions {
		if p.At < 0 || p.For <= 0 || !(p.Fraction > 0 && p.Fraction <= 1) {
			bad("network.partitions[%d]: at must not be negative, for positive, fraction in (0, 1]", i)
		}
	}
	for i, o := range n.Outages {
		if o.At < 0 || o.For <= 0 {
			bad("network.outages[%d]: at must not be negative and for positive", i)
		}
	}
	w := s.Workload
	if !(w.ExecRate >= 0 && w.ExecRate <= 1e6) {
		bad("workload.exec_rate %v is outside [0, 1e6]", w.ExecRate)
	}
	if !(w.SetupRate >= 0 && w.SetupRate <= 1e6) {
		bad("workload.setup_rate %v is outside [0, 1e6]", w.SetupRate)
	}
	if err := w.ExecDuration.Validate("workload.exec_duration"); err != nil {
		errs = append(errs, err)
	}
	if err := w.SetupDuration.Validate("workload.setup_duration"); err != nil {
		errs = append(errs, err)
	}
	for i, b := range w.Bursts {
		if b.At < 0 || b.For <= 0 || !(b.Rate >= 0 && b.Rate <= 1e6) {
			bad("workload.bursts[%d]: at must not be negative, for positive, rate in [0, 1e6]", i)
		}
	}
	for i, h := range w.Hibernates {
		if h.At < 0 || h.For <= 0 || !(h.Fraction > 0 && h.Fraction <= 1) {
			bad("workload.hibernates[%d]: at must not be negative, for positive, fraction in (0, 1]", i)
		}
	}
	for i, h := range w.Drains {
		if h.At < 0 || !(h.Fraction > 0 && h.Fraction <= 1) {
			bad("workload.drains[%d]: at must not be negative, fraction in (0, 1]", i)
		}
	}
	if len(n.Partitions) > MaxScheduled || len(n.Outages) > MaxScheduled || len(w.Hibernates) > MaxScheduled || len(w.Drains) > MaxScheduled {
		bad("at most %d partitions, outages, hibernates and drains each", MaxScheduled)
	}
	if len(errs) > 0 {
		return fmt.Errorf("scenario %q: %w", s.Name, errors.Join(errs...))
	}
	return nil
}
