package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// metrics accumulates what happens between two samples (the counters) and
// over the whole run (the totals).
type metrics struct {
	counters
	latencies []int64 // dispatch latencies of the window, ns

	last     counters // the counters at the previous sample
	rows     []Row
	allLat   []int64
	lastTime int64
}

type counters struct {
	routes    [RouteCount]uint64
	refused   uint64
	lost      uint64
	started   uint64
	completed uint64
	enqueued  uint64
	opFailed  uint64
	exits     uint64
}

// backoffBounds are the upper bounds of the backoff wait buckets of a
// Row (the last bucket, Backoff[len(backoffBounds)], is everything
// longer); the CSV's column names are made from them.
var backoffBounds = [...]time.Duration{2 * time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second}

// BackoffBuckets are the upper bounds of the backoff wait buckets of a
// Row (the last bucket is everything longer).
func BackoffBuckets() []time.Duration { return backoffBounds[:] }

// backoffBucket is the bucket of a wait of ns.
func backoffBucket(ns int64) int {
	for j, ub := range backoffBounds {
		if ns < int64(ub) {
			return j
		}
	}
	return len(backoffBounds)
}

// Row is one sample of the time series: rates over the window that ends
// at T, gauges at T.
type Row struct {
	T time.Duration
	// Requests per second that reached the plane, by route, and refused
	// (plane down, relay gone) or lost on the way.
	Hello, Poll, Result, Ack, Notify float64
	Refused, Lost                    float64
	// Parked polls and commands queued at the plane, not yet delivered.
	Parked, QueueDepth int
	// Dispatch latency (exec accepted by the plane → started by its
	// daemon) of the execs started in the window; -1 when none started.
	DispatchP50, DispatchP99 time.Duration
	Started, Completed       uint64
	// Daemons in backoff, and by the length of the wait they drew
	// (BackoffBuckets).
	InBackoff int
	Backoff   [len(backoffBounds) + 1]int
	// Daemons by state.
	Polling, Hibernating, Exited int
}

// Requests is the total request rate that reached the plane.
func (r Row) Requests() float64 { return r.Hello + r.Poll + r.Result + r.Ack + r.Notify }

// Summary is the run in a few figures.
type Summary struct {
	Scenario string
	Seed     uint64
	Daemons  int
	Duration time.Duration
	Events   uint64

	// Requests that reached the plane, by Route.
	Requests                        [RouteCount]uint64
	Refused, Lost                   uint64
	PeakRate                        float64 // requests/s, the highest Row
	PeakAt                          time.Duration
	MeanRate                        float64
	PeakParked, PeakQueue, PeakBack int

	Enqueued, Started, Completed, OperatorFailed uint64
	DispatchP50, DispatchP99, DispatchMax        time.Duration
	Exits                                        uint64
}

// Result is what Run measured.
type Result struct {
	Rows    []Row
	Summary Summary
}

// Percentile is the nearest-rank p-th percentile of sorted v, in ns, as
// the time series reports dispatch latency; -1 when v is empty.
func Percentile(v []int64, p float64) time.Duration {
	if len(v) == 0 {
		return -1
	}
	i := int(p*float64(len(v))+0.999999) - 1
	return time.Duration(v[min(max(i, 0), len(v)-1)])
}

// window closes the sample window that ends at now: the row of this
// side's counters (rates over the window, the dispatch latencies of the
// execs started in it); the other side's fields stay zero, and the
// plane's dispatch percentiles -1 (it starts no exec).
func (m *metrics) window(now int64) Row {
	span := float64(now-m.lastTime) / float64(time.Second)
	rate := func(now, then uint64) float64 { return float64(now-then) / span }
	slices.Sort(m.latencies)
	row := Row{
		T:           time.Duration(now),
		Hello:       rate(m.routes[RouteHello], m.last.routes[RouteHello]),
		Poll:        rate(m.routes[RoutePoll], m.last.routes[RoutePoll]),
		Result:      rate(m.routes[RouteResult], m.last.routes[RouteResult]),
		Ack:         rate(m.routes[RouteAck], m.last.routes[RouteAck]),
		Notify:      rate(m.routes[RouteNotify], m.last.routes[RouteNotify]),
		Refused:     rate(m.refused, m.last.refused),
		Lost:        rate(m.lost, m.last.lost),
		DispatchP50: Percentile(m.latencies, 0.50),
		DispatchP99: Percentile(m.latencies, 0.99),
		Started:     m.started - m.last.started,
		Completed:   m.completed - m.last.completed,
	}
	m.allLat = append(m.allLat, m.latencies...)
	m.latencies = m.latencies[:0]
	m.last = m.counters
	m.lastTime = now
	return row
}

// sample records the fleet's half of a row: its counters and the
// daemons by state and backoff.
func (f *fleet) sample() {
	row := f.met.window(f.now)
	for i := range f.nodes {
		n := &f.nodes[i]
		switch n.state {
		case stBackoff:
			row.InBackoff++
			row.Backoff[backoffBucket(n.backoffWait)]++
		case stPolling:
			row.Polling++
		case stHibernating:
			row.Hibernating++
		case stExited:
			row.Exited++
		}
	}
	f.met.rows = append(f.met.rows, row)
}

// sample records the plane's half of a row: requests by route, what it
// refused or lost, parked polls and queue depth.
func (p *planeSide) sample() {
	row := p.met.window(p.now)
	row.Parked, row.QueueDepth = p.parkedPolls(), p.plane.PendingCommands()
	p.met.rows = append(p.met.rows, row)
}

// joinRows is the time series: each fleet row with the plane's of the
// same time (both sides sample on the same schedule).
func joinRows(fr, pr []Row) []Row {
	rows := make([]Row, min(len(fr), len(pr)))
	for i := range rows {
		f, p := fr[i], pr[i]
		f.Hello, f.Poll, f.Result, f.Ack, f.Notify = p.Hello, p.Poll, p.Result, p.Ack, p.Notify
		f.Refused += p.Refused
		f.Lost += p.Lost
		f.Parked, f.QueueDepth = p.Parked, p.QueueDepth
		rows[i] = f
	}
	return rows
}

// Result is what the run measured so far; after Run, or after a driver
// has stepped both Sides to Never, the whole run.
func (s *Sim) Result() Result {
	fm, pm := &s.fleet.met, &s.plane.met
	rows := joinRows(fm.rows, pm.rows)
	sum := Summary{
		Scenario: s.w.sc.Name, Seed: s.w.sc.Seed, Daemons: len(s.fleet.nodes), Duration: s.w.sc.Duration,
		Events: s.fleet.events + s.plane.events, Requests: pm.routes,
		Refused: fm.refused + pm.refused, Lost: fm.lost + pm.lost,
		Enqueued: pm.enqueued, Started: fm.started, Completed: fm.completed,
		OperatorFailed: pm.opFailed, Exits: fm.exits,
	}
	var total float64
	for _, r := range rows {
		total += r.Requests()
		if r.Requests() > sum.PeakRate {
			sum.PeakRate, sum.PeakAt = r.Requests(), r.T
		}
		sum.PeakParked = max(sum.PeakParked, r.Parked)
		sum.PeakQueue = max(sum.PeakQueue, r.QueueDepth)
		sum.PeakBack = max(sum.PeakBack, r.InBackoff)
	}
	if len(rows) > 0 {
		sum.MeanRate = total / float64(len(rows))
	}
	lat := slices.Clone(fm.allLat)
	slices.Sort(lat)
	sum.DispatchP50 = Percentile(lat, 0.50)
	sum.DispatchP99 = Percentile(lat, 0.99)
	sum.DispatchMax = Percentile(lat, 1)
	return Result{Rows: rows, Summary: sum}
}

// CSVHeader names the columns WriteCSV writes.
func CSVHeader() string {
	h := "t_s,requests_s,hello_s,poll_s,result_s,ack_s,notify_s,refused_s,lost_s," +
		"parked,queue_depth,dispatch_p50_ms,dispatch_p99_ms,execs_started,execs_completed,in_backoff,"
	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	for j, ub := range backoffBounds {
		if j == 0 {
			h += "backoff_lt" + secs(ub) + "s,"
		} else {
			h += "backoff_" + secs(backoffBounds[j-1]) + "_" + secs(ub) + "s,"
		}
	}
	return h + "backoff_ge" + secs(backoffBounds[len(backoffBounds)-1]) + "s,polling,hibernating,exited"
}

// WriteCSV writes the time series, one Row a line. Numbers are formatted
// with fixed precision, so the bytes depend on the figures alone.
func (r Result) WriteCSV(w io.Writer) error {
	buf := make([]byte, 0, 64*1024)
	buf = append(buf, CSVHeader()...)
	buf = append(buf, '\n')
	f := func(v float64, prec int) { buf = strconv.AppendFloat(buf, v, 'f', prec, 64); buf = append(buf, ',') }
	n := func(v int64) { buf = strconv.AppendInt(buf, v, 10); buf = append(buf, ',') }
	ms := func(d time.Duration) {
		if d < 0 {
			buf = append(buf, ',')
			return
		}
		f(float64(d)/float64(time.Millisecond), 3)
	}
	for _, row := range r.Rows {
		f(row.T.Seconds(), 3)
		f(row.Requests(), 3)
		for _, v := range []float64{row.Hello, row.Poll, row.Result, row.Ack, row.Notify, row.Refused, row.Lost} {
			f(v, 3)
		}
		n(int64(row.Parked))
		n(int64(row.QueueDepth))
		ms(row.DispatchP50)
		ms(row.DispatchP99)
		n(int64(row.Started))
		n(int64(row.Completed))
		n(int64(row.InBackoff))
		for _, b := range row.Backoff {
			n(int64(b))
		}
		n(int64(row.Polling))
		n(int64(row.Hibernating))
		n(int64(row.Exited))
		buf[len(buf)-1] = '\n'
		if len(buf) > 60*1024 {
			if _, err := w.Write(buf); err != nil {
				return fmt.Errorf("write csv: %w", err)
			}
			buf = buf[:0]
		}
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// WriteSummary writes the summary table.
func (r Result) WriteSummary(w io.Writer) error {
	s := r.Summary
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	}
	lines := [][2]string{
		{"scenario", s.Scenario},
		{"seed", strconv.FormatUint(s.Seed, 10)},
		{"daemons", strconv.Itoa(s.Daemons)},
		{"virtual time", s.Duration.String()},
		{"events", strconv.FormatUint(s.Events, 10)},
		{"requests hello/poll/result/ack/notify", fmt.Sprintf("%d / %d / %d / %d / %d",
			s.Requests[RouteHello], s.Requests[RoutePoll], s.Requests[RouteResult], s.Requests[RouteAck], s.Requests[RouteNotify])},
		{"requests refused / lost", fmt.Sprintf("%d / %d", s.Refused, s.Lost)},
		{"plane requests/s mean", strconv.FormatFloat(s.MeanRate, 'f', 1, 64)},
		{"plane requests/s peak", fmt.Sprintf("%.1f at %s", s.PeakRate, s.PeakAt)},
		{"peak parked polls", strconv.Itoa(s.PeakParked)},
		{"peak queue depth", strconv.Itoa(s.PeakQueue)},
		{"peak daemons in backoff", strconv.Itoa(s.PeakBack)},
		{"execs enqueued / started / completed", fmt.Sprintf("%d / %d / %d", s.Enqueued, s.Started, s.Completed)},
		{"operator requests failed", strconv.FormatUint(s.OperatorFailed, 10)},
		{"dispatch latency p50 / p99 / max", ms(s.DispatchP50) + " / " + ms(s.DispatchP99) + " / " + ms(s.DispatchMax)},
		{"daemons exited", strconv.FormatUint(s.Exits, 10)},
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	var buf []byte
	for _, l := range lines {
		buf = fmt.Appendf(buf, "%-*s  %s\n", width, l[0], l[1])
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}
