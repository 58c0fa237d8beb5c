package introspect

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

func get(t *testing.T, url string) (string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b), resp.Header.Get("Content-Type")
}

func TestStatusAndMetrics(t *testing.T) {
	var b Board
	srv, err := Listen("127.0.0.1:0", &b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	base := "http://" + srv.Addr.String()

	v := "0.1.0"
	polled := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.Publish(Snapshot{
		Status: daemon.Status{State: daemon.StatePolling, WorkerID: "w1", Queue: "gpu*", ExecsRunning: 2, RunsRunning: 1,
			PermitsFree: 97, LastPollAt: polled,
			Counters: daemon.Counters{Polls: 7, PollErrors: 2, ExecsOK: 3, ExecsTimedOut: 1}},
		Versions:    wire.Versions{Daemon: &v, CPU: &wire.CPU{Model: "m", Cores: 4}},
		RunOutcomes: map[string]uint64{wire.StateFailed: 2},
		BackoffS:    1.5,
	})

	body, ct := get(t, base+"/status")
	if ct != "application/json" {
		t.Fatalf("status content type %q", ct)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	inflight := doc["in_flight"].(map[string]any)
	versions := doc["versions"].(map[string]any)
	if doc["state"] != "polling" || doc["worker_id"] != "w1" || doc["queue"] != "gpu*" || inflight["execs"] != 2.0 ||
		doc["backoff_s"] != 1.5 || doc["last_poll_at"] != "2026-01-02T03:04:05Z" || versions["daemon"] != "0.1.0" ||
		versions["gpu"] != nil || versions["cpu"].(map[string]any)["cores"] != 4.0 {
		t.Fatalf("status document:\n%s", body)
	}
	if c := doc["counters"].(map[string]any); c["polls"] != 7.0 || c["execs_timed_out"] != 1.0 {
		t.Fatalf("counters: %v", c)
	}
	if _, ok := versions["docker"]; !ok {
		t.Fatalf("null versions must still be present:\n%s", body)
	}

	metrics, ct := get(t, base+"/metrics")
	if !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("metrics content type %q", ct)
	}
	for _, line := range []string{
		"nymph_polls_total 7", "nymph_poll_errors_total 2",
		`nymph_execs_total{outcome="ok"} 3`, `nymph_execs_total{outcome="timeout"} 1`,
		`nymph_runs_total{outcome="failed"} 2`, `nymph_runs_total{outcome="succeeded"} 0`,
		`nymph_in_flight{kind="exec"} 2`, `nymph_in_flight{kind="run"} 1`,
		"nymph_backoff_seconds 1.5", `nymph_state{state="polling"} 1`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, metrics)
		}
	}
}

func TestListenRefusesNonLoopbackAndBusyPort(t *testing.T) {
	var b Board
	if _, err := Listen("0.0.0.0:0", &b, nil); err == nil {
		t.Fatal("bound a non-loopback address")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen(ln.Addr().String(), &b, nil); err == nil {
		t.Fatal("bound a busy port")
	}
}
