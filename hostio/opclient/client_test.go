package opclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// fakePlane serves the operator routes a test needs, checking the bearer.
type fakePlane struct {
	t  *testing.T
	mu sync.Mutex
	// logs is served in pieces of chunk bytes; done once all are served.
	logs   []byte
	chunk  int
	result *wire.ExecResult
	execs  []operator.ExecRequest
	paths  []string
}

func (f *fakePlane) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.paths = append(f.paths, r.Method+" "+r.URL.EscapedPath())
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			writeJSON(w, 401, operator.Error{Error: "bad admin token"})
			return
		}
		p := r.URL.EscapedPath()
		switch {
		case r.Method == "GET" && p == operator.PathWorkers:
			writeJSON(w, 200, []operator.Worker{{ID: "w1", Label: "box", State: "active", Capabilities: wire.Capabilities{Runners: []string{"process"}}}})
		case r.Method == "POST" && strings.HasSuffix(p, "/exec"):
			var req operator.ExecRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				writeJSON(w, 400, operator.Error{Error: err.Error()})
				return
			}
			f.execs = append(f.execs, req)
			writeJSON(w, 200, operator.ExecAccepted{ExecID: "e1", CommandID: "c1"})
		case r.Method == "GET" && p == "/v1/admin/execs/e1/logs":
			var off int64
			json.Unmarshal([]byte(r.URL.Query().Get("offset")), &off)
			end := min(off+int64(f.chunk), int64(len(f.logs)))
			writeJSON(w, 200, operator.LogsPage{Offset: off, Data: f.logs[off:end], NextOffset: end, Done: end == int64(len(f.logs))})
		case r.Method == "GET" && p == "/v1/admin/execs/e1":
			writeJSON(w, 200, operator.ExecStatus{ExecID: "e1", WorkerID: "w1", State: "finished", Result: f.result})
		case r.Method == "POST" && p == "/v1/admin/workers/a%2Fb/reset":
			writeJSON(w, 200, operator.CommandAccepted{CommandID: "c9", WorkerID: "a/b"})
		case p == "/v1/admin/workers/gone/reset":
			writeJSON(w, 404, operator.Error{Error: "unknown worker gone"})
		case p == "/v1/admin/workers/html/reset":
			w.WriteHeader(502)
			w.Write([]byte("<html>bad gateway</html>"))
		default:
			writeJSON(w, 404, operator.Error{Error: "no route " + p})
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func newClient(t *testing.T, f *fakePlane, token string) *Client {
	t.Helper()
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWorkersAndAuth(t *testing.T) {
	f := &fakePlane{t: t}
	c := newClient(t, f, "s3cret")
	ws, err := c.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].ID != "w1" {
		t.Fatalf("workers = %+v", ws)
	}
	_, err = newClient(t, f, "wrong").Workers(context.Background())
	if err == nil || !strings.Contains(err.Error(), "401 bad admin token") {
		t.Fatalf("wrong token: err = %v, want the server's 401 message", err)
	}
}

func TestErrorsAndEscaping(t *testing.T) {
	f := &fakePlane{t: t}
	c := newClient(t, f, "s3cret")
	ctx := context.Background()
	acc, err := c.Reset(ctx, "a/b")
	if err != nil || acc.CommandID != "c9" {
		t.Fatalf("reset of an id with a slash: %+v %v", acc, err)
	}
	_, err = c.Reset(ctx, "gone")
	if !IsNotFound(err) || !strings.Contains(err.Error(), "unknown worker gone") {
		t.Fatalf("404: %v", err)
	}
	_, err = c.Reset(ctx, "html")
	if err == nil || !strings.Contains(err.Error(), "502 <html>bad gateway</html>") {
		t.Fatalf("non-JSON error: %v", err)
	}
	if _, err := New("ftp://x", "", nil); err == nil {
		t.Fatal("ftp server URL accepted")
	}
	if _, err := New("127.0.0.1:8383", "", nil); err == nil {
		t.Fatal("server URL without scheme accepted")
	}
}

func TestRunExecStreamsThenReturnsResult(t *testing.T) {
	f := &fakePlane{t: t, logs: []byte("line 1\nline 2\nline 3\n"), chunk: 5, result: &wire.ExecResult{ExitCode: 3}}
	c := newClient(t, f, "s3cret")
	var out, errb bytes.Buffer
	stdin := "input"
	timeout := 2.5
	acc, res, err := c.RunExec(context.Background(), "w1", operator.ExecRequest{Command: "x", Stdin: &stdin, TimeoutS: &timeout, Stream: true}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(f.logs) {
		t.Fatalf("streamed output = %q, want %q", out.String(), f.logs)
	}
	if acc.ExecID != "e1" || res.Result.ExitCode != 3 || res.Streamed != int64(len(f.logs)) {
		t.Fatalf("acc=%+v res=%+v", acc, res)
	}
	if len(f.execs) != 1 || !f.execs[0].Stream || *f.execs[0].Stdin != "input" || *f.execs[0].TimeoutS != 2.5 {
		t.Fatalf("exec request = %+v, want stream on and fields forwarded", f.execs)
	}
}

func TestRunExecWithoutStreamPrintsResult(t *testing.T) {
	f := &fakePlane{t: t, chunk: 1, result: &wire.ExecResult{ExitCode: 0, Stdout: "o", Stderr: "e"}}
	c := newClient(t, f, "s3cret")
	var out, errb bytes.Buffer
	if _, _, err := c.RunExec(context.Background(), "w1", operator.ExecRequest{Command: "x"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if out.String() != "o" || errb.String() != "e" {
		t.Fatalf("stdout=%q stderr=%q", out.String(), errb.String())
	}
}

func TestExitStatus(t *testing.T) {
	trunc := wire.TruncatedStdout
	for _, tc := range []struct {
		code    int64
		errText *string
		want    int
		msg     string
	}{
		{0, nil, 0, ""},
		{7, nil, 7, ""},
		{-2, nil, ExitTimedOut, "timed out"},
		{-1, nil, ExitNotRun, "could not run"},
		{300, nil, ExitAbnormal, "exit code 300"},
		{0, &trunc, 0, "stdout truncated"},
	} {
		got, msg := ExitStatus("e9", wire.ExecResult{ExitCode: wire.Int(tc.code), Error: tc.errText})
		if got != tc.want || (tc.msg == "") != (msg == "") || !strings.Contains(msg, tc.msg) {
			t.Errorf("ExitStatus(%d) = %d %q, want %d containing %q", tc.code, got, msg, tc.want, tc.msg)
		}
	}
}

func TestWaitWorkerRetriesUntilServerUp(t *testing.T) {
	f := &fakePlane{t: t}
	h := f.handler()
	var up sync.Once
	ready := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ready:
			h.ServeHTTP(w, r)
		default:
			up.Do(func() { close(ready) }) // first call fails like a server still starting
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "s3cret", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A 503 is an operator answer, not a transport error: it is returned.
	if _, err := c.WaitWorker(ctx, func(operator.Worker) bool { return true }); err == nil {
		t.Fatal("503 not reported")
	}
	w, err := c.WaitWorker(ctx, func(w operator.Worker) bool { return w.State == "active" })
	if err != nil || w.ID != "w1" {
		t.Fatalf("WaitWorker = %+v, %v", w, err)
	}
}

func TestMatchWorker(t *testing.T) {
	ws := []operator.Worker{
		{ID: "a", MachineID: "host1", Label: "one", State: "active"},
		{ID: "b", MachineID: "host2", Label: "two", State: "lost"},
		{ID: "c", MachineID: "host2", Label: "two", State: "active"},
		{ID: "d", MachineID: "host3", Label: "x", State: "active"},
		{ID: "e", MachineID: "host4", Label: "x", State: "active"},
	}
	for _, tc := range []struct {
		ref, want string
	}{
		{"a", "a"}, {"host1", "a"}, {"one", "a"},
		{"host2", "c"}, // the live one of two
		{"x", ""},      // two live workers: ambiguous
		{"nope", ""},
	} {
		w, ok := MatchWorker(ws, tc.ref)
		if ok != (tc.want != "") || w.ID != tc.want {
			t.Errorf("MatchWorker(%q) = %q, %v; want %q", tc.ref, w.ID, ok, tc.want)
		}
	}
}

func TestRedirectIsRefusedAndTheBearerStaysHome(t *testing.T) {
	// Same host, another port: Go's default policy would send the bearer.
	var leaked []string
	var mu sync.Mutex
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Get("Authorization"))
		mu.Unlock()
		writeJSON(w, 200, []operator.Worker{})
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	for _, hc := range []*http.Client{nil, {}} {
		c, err := New(srv.URL, "s3cret", hc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Workers(context.Background())
		mu.Lock()
		if len(leaked) > 0 {
			t.Fatalf("the redirect was followed: the other port saw Authorization %q", leaked)
		}
		mu.Unlock()
		if !errors.Is(err, httpclient.ErrRedirect) || !strings.Contains(err.Error(), "307 with Location "+other.URL+operator.PathWorkers) {
			t.Fatalf("err = %v, want a refused redirect naming %s", err, other.URL)
		}
	}
}
