package planeserver

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/hostio/promtext"
	"github.com/nymphd/nymph/wirecore/plane"
)

// metrics are what serve counts for operator.PathMetrics: the requests it
// answered, by route and status, and its store's applies. The plane's own
// state (workers, parked polls, queues) is read from the core at scrape
// time (plane.Gauges), not kept here.
type metrics struct {
	mu       sync.Mutex
	requests map[routeStatus]uint64

	applies, applyFailures atomic.Uint64
	applyNanos             atomic.Uint64
}

type routeStatus struct {
	route string // the mux pattern, "" for none
	code  int
}

// counted counts every request mux answers under the pattern it routed
// it by (the mux sets r.Pattern on the request it is handed), once the
// handler returns: a long-poll when it is answered.
func counted(m *metrics, mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		mux.ServeHTTP(sw, r)
		pattern, code := r.Pattern, sw.code
		if code == 0 {
			code = http.StatusOK
		}
		m.mu.Lock()
		if m.requests == nil {
			m.requests = map[routeStatus]uint64{}
		}
		m.requests[routeStatus{pattern, code}]++
		m.mu.Unlock()
	})
}

// statusWriter remembers the status a handler wrote; Unwrap lets
// http.ResponseController reach the connection beneath (deadlines,
// flushes).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ReadFrom keeps the connection's sendfile path for blob and release
// downloads (io.Copy asks the writer for it).
func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return io.Copy(w.ResponseWriter, r)
}

// applied records one Store.Apply of the loop.
func (m *metrics) applied(took time.Duration, err error) {
	m.applies.Add(1)
	m.applyNanos.Add(uint64(took.Nanoseconds()))
	if err != nil {
		m.applyFailures.Add(1)
	}
}

// serveMetrics answers operator.PathMetrics (routes, under the admin
// bearer).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	var g plane.Gauges
	if err := s.Peek(r.Context(), func(p *plane.Plane) { g = p.Gauges() }); err != nil {
		adminError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	w.Header().Set("Content-Type", promtext.ContentType)
	p := promtext.Writer{W: w}

	p.Family("nymph_serve_requests_total", "counter", "Requests answered, by route (the pattern it matched) and HTTP status.")
	s.metrics.mu.Lock()
	keys := make([]routeStatus, 0, len(s.metrics.requests))
	for k := range s.metrics.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b routeStatus) int {
		if a.route != b.route {
			if a.route < b.route {
				return -1
			}
			return 1
		}
		return a.code - b.code
	})
	for _, k := range keys {
		route := k.route
		if route == "" {
			route = "unmatched"
		}
		p.Int("nymph_serve_requests_total", promtext.Label("route", route)+","+promtext.Label("code", strconv.Itoa(k.code)), s.metrics.requests[k])
	}
	s.metrics.mu.Unlock()

	p.Counter("nymph_serve_store_applies_total", "Batches applied to the store (each a transaction).", s.metrics.applies.Load())
	p.Counter("nymph_serve_store_apply_failures_total", "Store applies that failed (the plane was reloaded from the store).", s.metrics.applyFailures.Load())
	p.Family("nymph_serve_store_apply_seconds_total", "counter", "Time spent in store applies.")
	p.Float("nymph_serve_store_apply_seconds_total", "", float64(s.metrics.applyNanos.Load())/1e9)

	states := func(name, help string, by map[string]int) {
		values := make(map[string]uint64, len(by))
		for k, v := range by {
			values[k] = uint64(v)
		}
		p.ByLabel(name, "gauge", help, "state", values)
	}
	states("nymph_serve_workers", "Workers registered, by state.", g.Workers)
	p.Gauge("nymph_serve_parked_requests", "Requests held open: parked polls and log waits.", float64(g.Parked))
	p.Gauge("nymph_serve_pending_commands", "Commands queued for their worker, not handed out yet.", float64(g.PendingCommands))
	p.Gauge("nymph_serve_unconfirmed_commands", "Commands handed out under a cursor, not confirmed by their daemon yet.", float64(g.Unconfirmed))
	states("nymph_serve_execs", "Execs the plane holds, by state (finished ones while retained).", g.Execs)
	states("nymph_serve_invocations", "Invocations the plane holds, by state (finished ones while retained).", g.Invocations)
}
