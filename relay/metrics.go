//go:build unix

package relay

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/hostio/promtext"
)

// errKind names a class of failure counted in the metrics.
type errKind int

// Failure classes, in the order /metrics lists them.
const (
	errOversize     errKind = iota // frame over the ceiling (413)
	errStall                       // partial frame dropped after the stall timer
	errEnvelope                    // not an envelope, bad id or header (400)
	errEndpoint                    // endpoint not on the allow-list (400)
	errUpstream                    // transport failure (status 0)
	errStatus                      // upstream answered non-2xx
	errShutdown                    // cut off by shutdown (503)
	errReplyDropped                // the daemon stopped waiting
	errPipeRefused                 // symlink escape, o+w, not a FIFO
	errSpool                       // spool file I/O
	errAbandoned                   // a new frame came before the reply
	numErrKinds
)

var errKindNames = [numErrKinds]string{
	"oversize", "stall", "envelope", "endpoint", "upstream_transport",
	"upstream_status", "shutdown", "reply_dropped", "pipe_refused", "spool",
	"abandoned",
}

// latencyBuckets are the upper bounds, in seconds, of the upstream latency
// histogram; long-polls park for about 20 s, hence the long tail.
var latencyBuckets = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// Metrics counts what the relay does. Every field is updated atomically so
// pumps never contend on a lock.
type Metrics struct {
	start     time.Time
	pumps     atomic.Int64
	unheld    atomic.Int64 // pumps that open their reply pipe per reply
	machines  atomic.Int64
	spoolDirs atomic.Int64
	frames    atomic.Uint64
	replies   atomic.Uint64
	// respReplaced counts reply pipes seen renamed over the one a pump
	// holds. A pump learns of the rename from discovery only, so a reply
	// written before that event is handled goes to the old pipe; tests
	// that replace a pipe wait on this count before they send.
	respReplaced atomic.Uint64
	bytesIn      atomic.Uint64
	bytesOut     atomic.Uint64
	errs         [numErrKinds]atomic.Uint64
	latCounts    [len(latencyBuckets) + 1]atomic.Uint64
	latSumNano   atomic.Uint64
}

func newMetrics(now time.Time) *Metrics { return &Metrics{start: now} }

func (m *Metrics) fail(k errKind) { m.errs[k].Add(1) }

func (m *Metrics) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBuckets) && s > latencyBuckets[i] {
		i++
	}
	m.latCounts[i].Add(1)
	m.latSumNano.Add(uint64(max(d, 0)))
}

// Status is the JSON document served at /status.
type Status struct {
	UptimeSeconds float64 `json:"uptime_seconds"`
	Pumps         int64   `json:"pumps"`
	// UnheldReplyPipes counts pairs whose reply pipe the open-file budget
	// did not let the relay hold: a daemon on one must open resp
	// non-blocking (see the README's relay section).
	UnheldReplyPipes int64             `json:"unheld_reply_pipes"`
	Machines         int64             `json:"machines"`
	SpoolDirs        int64             `json:"spool_dirs"`
	Frames           uint64            `json:"frames"`
	Replies          uint64            `json:"replies"`
	BytesIn          uint64            `json:"bytes_in"`
	BytesOut         uint64            `json:"bytes_out"`
	Errors           map[string]uint64 `json:"errors"`
	Upstream         LatencySummary    `json:"upstream"`
}

// LatencySummary is the upstream latency histogram in /status.
type LatencySummary struct {
	Count      uint64            `json:"count"`
	SumSeconds float64           `json:"sum_seconds"`
	Buckets    map[string]uint64 `json:"buckets"` // cumulative, by upper bound
}

// Snapshot returns the current figures.
func (m *Metrics) Snapshot(now time.Time) Status {
	st := Status{
		UptimeSeconds:    now.Sub(m.start).Seconds(),
		Pumps:            m.pumps.Load(),
		UnheldReplyPipes: m.unheld.Load(),
		Machines:         m.machines.Load(),
		SpoolDirs:        m.spoolDirs.Load(),
		Frames:           m.frames.Load(),
		Replies:          m.replies.Load(),
		BytesIn:          m.bytesIn.Load(),
		BytesOut:         m.bytesOut.Load(),
		Errors:           make(map[string]uint64, numErrKinds),
		Upstream:         LatencySummary{Buckets: make(map[string]uint64, len(latencyBuckets)+1)},
	}
	for k := range numErrKinds {
		st.Errors[errKindNames[k]] = m.errs[k].Load()
	}
	var cum uint64
	for i := range m.latCounts {
		cum += m.latCounts[i].Load()
		st.Upstream.Buckets[bucketLabel(i)] = cum
	}
	st.Upstream.Count = cum
	st.Upstream.SumSeconds = float64(m.latSumNano.Load()) / 1e9
	return st
}

func bucketLabel(i int) string {
	if i == len(latencyBuckets) {
		return "+Inf"
	}
	return strconv.FormatFloat(latencyBuckets[i], 'g', -1, 64)
}

// WritePrometheus writes the figures in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer, now time.Time) {
	st := m.Snapshot(now)
	p := promtext.Writer{W: w}
	p.Gauge("nymph_relay_pumps", "FIFO pairs being pumped.", float64(st.Pumps))
	p.Gauge("nymph_relay_unheld_reply_pipes", "FIFO pairs whose reply pipe is opened per reply, past the open-file budget.", float64(st.UnheldReplyPipes))
	p.Gauge("nymph_relay_machines", "Machine directories watched.", float64(st.Machines))
	p.Gauge("nymph_relay_spool_dirs", "Spool directories polled.", float64(st.SpoolDirs))
	p.Gauge("nymph_relay_uptime_seconds", "Seconds since the relay started.", st.UptimeSeconds)
	p.Counter("nymph_relay_frames_total", "Request frames read.", st.Frames)
	p.Counter("nymph_relay_replies_total", "Reply frames delivered.", st.Replies)
	p.Counter("nymph_relay_bytes_in_total", "Bytes read from pipes and spool files.", st.BytesIn)
	p.Counter("nymph_relay_bytes_out_total", "Reply bytes delivered.", st.BytesOut)
	p.Family("nymph_relay_errors_total", "counter", "Failures by kind.")
	for k := range numErrKinds {
		p.Int("nymph_relay_errors_total", promtext.Label("kind", errKindNames[k]), st.Errors[errKindNames[k]])
	}
	const h = "nymph_relay_upstream_seconds"
	p.Family(h, "histogram", "Upstream request latency.")
	for i := range m.latCounts {
		label := bucketLabel(i)
		p.Int(h+"_bucket", promtext.Label("le", label), st.Upstream.Buckets[label])
	}
	p.Float(h+"_sum", "", st.Upstream.SumSeconds)
	p.Int(h+"_count", "", st.Upstream.Count)
}

// Handler serves /metrics (Prometheus text) and /status (JSON).
func (m *Metrics) Handler(now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", promtext.ContentType)
		m.WritePrometheus(w, now())
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(m.Snapshot(now()))
	})
	return mux
}
