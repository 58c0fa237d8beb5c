package planeserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// /metrics counts the requests answered by route and status (a long-poll
// once it is answered, an unknown path under "unmatched"), the store's
// applies, and reads the plane's gauges; it takes the admin bearer only.
func TestMetrics(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	ts.poll(w, 0)
	ts.exec(w, "true", false)
	status, _ := ts.postMsg(wire.PathPoll, &wire.PollRequest{WorkerID: "no-such-worker", TimeoutS: 0})
	if status != http.StatusNotFound {
		t.Fatalf("poll of an unknown worker: %d", status)
	}
	req, _ := http.NewRequest("GET", ts.http.URL+"/v1/nowhere", nil)
	ts.do(req)

	req, _ = http.NewRequest("GET", ts.http.URL+operator.PathMetrics, nil)
	if status, _ := ts.do(req); status != http.StatusUnauthorized {
		t.Fatalf("/metrics without the admin bearer: %d", status)
	}
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	if status, _ := ts.do(req); status != http.StatusUnauthorized {
		t.Fatalf("/metrics with the daemon bearer: %d", status)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	status, body := ts.do(req)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	text := string(body)
	for _, want := range []string{
		`nymph_serve_requests_total{route="POST ` + wire.PathHello + `",code="200"} 1`,
		`nymph_serve_requests_total{route="POST ` + wire.PathPoll + `",code="200"} 1`,
		`nymph_serve_requests_total{route="POST ` + wire.PathPoll + `",code="404"} 1`,
		`nymph_serve_requests_total{route="POST ` + operator.PathExec + `",code="200"} 1`,
		`nymph_serve_requests_total{route="unmatched",code="404"} 1`,
		`nymph_serve_requests_total{route="GET ` + operator.PathMetrics + `",code="401"} 2`,
		`nymph_serve_workers{state="active"} 1`,
		`nymph_serve_workers{state="lost"} 0`,
		`nymph_serve_pending_commands 1`,
		`nymph_serve_execs{state="queued"} 1`,
		"# TYPE nymph_serve_store_applies_total counter",
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("no line %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "nymph_serve_store_applies_total 0\n") {
		t.Errorf("hello and exec stored nothing:\n%s", text)
	}
}
