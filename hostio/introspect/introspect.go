// Package introspect is the daemon's optional loopback status server
// ([introspect] enabled): GET /status answers JSON, GET /metrics answers
// Prometheus text. It is bound before hello, so a daemon that cannot reach
// its control plane can still be inspected.
//
// It decides the shape of both documents and that it listens on loopback
// only. It does not decide anything the daemon does: the driver publishes a
// snapshot after each step, and the server only ever reads the latest one.
package introspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nymphd/nymph/hostio/promtext"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Snapshot is what the driver publishes: the core's status plus the facts
// only the driver knows.
type Snapshot struct {
	Status   daemon.Status
	Versions wire.Versions
	// RunOutcomes counts finished runs by terminal state.
	RunOutcomes map[string]uint64
	// BackoffS is the wait currently armed after a failed hello or poll (0
	// when none is).
	BackoffS float64
}

// Board holds the latest snapshot; the driver writes it, handlers read it.
type Board struct {
	mu   sync.RWMutex
	snap Snapshot
}

// Publish replaces the snapshot. The caller must not modify s's maps after.
func (b *Board) Publish(s Snapshot) {
	b.mu.Lock()
	b.snap = s
	b.mu.Unlock()
}

// Snapshot returns the latest snapshot.
func (b *Board) Snapshot() Snapshot {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.snap
}

// Handler serves /status and /metrics from the board.
func (b *Board) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(newStatusDoc(b.Snapshot()))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", promtext.ContentType)
		writeMetrics(w, b.Snapshot())
	})
	return mux
}

// Server is a running status server.
type Server struct {
	Addr net.Addr
	srv  *http.Server
	done chan struct{}
}

// Listen binds addr, which must be a loopback address, and serves the
// board until Close. A failure is the caller's to log as a warning.
func Listen(addr string, b *Board, log *slog.Logger) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("introspect: listen %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("introspect: listen %s: not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("introspect: listen %s: %w", addr, err)
	}
	s := &Server{
		Addr: ln.Addr(),
		srv:  &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 5 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Warn("introspection server stopped", "err", err)
		}
	}()
	return s, nil
}

// Close stops the server and waits for it.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// InFlight counts the work a daemon holds, in its GET /status document.
type InFlight struct {
	Execs        int  `json:"execs"`
	Runs         int  `json:"runs"`
	Held         int  `json:"held"`
	SetupRunning bool `json:"setup_running"`
	SetupsQueued int  `json:"setups_queued"`
}

// StatusDoc is the daemon's GET /status document. It is exported so that
// a reader in the same binary (nymph dev) decodes what is served, not a
// copy of it.
type StatusDoc struct {
	State          string            `json:"state"`
	WorkerID       string            `json:"worker_id"`
	Queue          string            `json:"queue"`
	InFlight       InFlight          `json:"in_flight"`
	PermitsFree    int               `json:"permits_free"`
	BackoffS       float64           `json:"backoff_s"`
	BackoffBaseS   float64           `json:"backoff_base_s"`
	LastPollAt     *time.Time        `json:"last_poll_at"`
	LastPollOKAt   *time.Time        `json:"last_poll_ok_at"`
	HibernateUntil *time.Time        `json:"hibernate_until,omitempty"`
	Versions       map[string]any    `json:"versions"`
	Counters       map[string]uint64 `json:"counters"`
	RunOutcomes    map[string]uint64 `json:"run_outcomes"`
}

func newStatusDoc(s Snapshot) StatusDoc {
	st := s.Status
	return StatusDoc{
		State: st.State, WorkerID: st.WorkerID, Queue: st.Queue,
		InFlight: InFlight{Execs: st.ExecsRunning, Runs: st.RunsRunning, Held: st.Held,
			SetupRunning: st.SetupRunning, SetupsQueued: st.SetupsQueued},
		PermitsFree: st.PermitsFree, BackoffS: s.BackoffS, BackoffBaseS: st.BackoffBaseS,
		LastPollAt: timeOrNil(st.LastPollAt), LastPollOKAt: timeOrNil(st.LastPollOKAt),
		HibernateUntil: timeOrNil(st.HibernateTill),
		Versions:       versionsDoc(s.Versions), Counters: countersDoc(st.Counters), RunOutcomes: s.RunOutcomes,
	}
}

// versionsDoc names the versions as the wire does (the Go struct carries
// msgpack tags only).
func versionsDoc(v wire.Versions) map[string]any {
	var cpu any
	if v.CPU != nil {
		cpu = map[string]any{"model": v.CPU.Model, "cores": int64(v.CPU.Cores)}
	}
	var gpu any
	if v.GPU != nil {
		rows := make([]map[string]any, len(v.GPU))
		for i, g := range v.GPU {
			rows[i] = map[string]any{"name": g.Name, "driver": g.Driver, "cuda": g.CUDA}
		}
		gpu = rows
	}
	return map[string]any{
		"daemon": v.Daemon, "protocol": v.Protocol, "runsc": v.Runsc, "docker": v.Docker,
		"python": v.Python, "kernel": v.Kernel, "distro": v.Distro, "arch": v.Arch,
		"cpu": cpu, "gpu": gpu,
	}
}

// countersDoc names the counters in snake_case, like every other key.
func countersDoc(c daemon.Counters) map[string]uint64 {
	return map[string]uint64{
		"hellos": c.Hellos, "hello_errors": c.HelloErrors, "polls": c.Polls, "poll_errors": c.PollErrors,
		"commands": c.Commands, "skipped": c.Skipped, "execs_started": c.ExecsStarted,
		"runs_started": c.RunsStarted, "runs_done": c.RunsDone, "setups": c.Setups,
		"execs_ok": c.ExecsOK, "execs_nonzero": c.ExecsNonZero, "execs_timed_out": c.ExecsTimedOut,
		"execs_failed": c.ExecsFailed, "acks_failed": c.AcksFailed, "results_failed": c.ResultsFailed,
	}
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func writeMetrics(w io.Writer, s Snapshot) {
	st, c := s.Status, s.Status.Counters
	p := promtext.Writer{W: w}
	p.Counter("nymph_hellos_total", "Hellos sent.", c.Hellos)
	p.Counter("nymph_hello_errors_total", "Hellos that failed.", c.HelloErrors)
	p.Counter("nymph_polls_total", "Polls sent.", c.Polls)
	p.Counter("nymph_poll_errors_total", "Polls that failed (transport error or non-2xx).", c.PollErrors)
	p.Counter("nymph_commands_total", "Commands received.", c.Commands)
	p.Counter("nymph_commands_skipped_total", "Commands logged and skipped.", c.Skipped)
	p.Counter("nymph_setups_total", "Setup scripts run.", c.Setups)
	p.Counter("nymph_acks_failed_total", "Acks that could not be posted.", c.AcksFailed)
	p.Counter("nymph_results_failed_total", "Exec results that could not be posted.", c.ResultsFailed)

	p.Family("nymph_execs_total", "counter", "Execs finished, by outcome.")
	for _, o := range []struct {
		label string
		v     uint64
	}{{"ok", c.ExecsOK}, {"nonzero", c.ExecsNonZero}, {"timeout", c.ExecsTimedOut}, {"failed", c.ExecsFailed}} {
		p.Int("nymph_execs_total", promtext.Label("outcome", o.label), o.v)
	}
	outcomes := map[string]uint64{wire.StateSucceeded: 0, wire.StateFailed: 0, wire.StateKilled: 0}
	for k, v := range s.RunOutcomes {
		outcomes[k] = v
	}
	p.ByLabel("nymph_runs_total", "counter", "Runs finished, by outcome.", "outcome", outcomes)

	p.Family("nymph_in_flight", "gauge", "Work running now, by kind.")
	setup := uint64(0)
	if st.SetupRunning {
		setup = 1
	}
	p.Int("nymph_in_flight", promtext.Label("kind", "exec"), uint64(st.ExecsRunning))
	p.Int("nymph_in_flight", promtext.Label("kind", "run"), uint64(st.RunsRunning))
	p.Int("nymph_in_flight", promtext.Label("kind", "setup"), setup)
	p.Gauge("nymph_held", "Execs and runs waiting for a permit.", float64(st.Held))
	p.Gauge("nymph_backoff_seconds", "Wait armed after a failed hello or poll.", s.BackoffS)
	p.Family("nymph_state", "gauge", "Current run-state (1 for the current one).")
	p.Int("nymph_state", promtext.Label("state", st.State), 1)
}
