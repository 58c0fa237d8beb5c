package planeserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

const (
	daemonToken = "daemon-secret"
	relayToken  = "relay-secret"
	adminToken  = "admin-secret"
)

type testServer struct {
	t     testing.TB
	srv   *Server
	http  *httptest.Server
	store Store
	stop  context.CancelFunc
	done  chan struct{}
	once  sync.Once
}

func newTestServer(t testing.TB, store Store, tweak func(*Config)) *testServer {
	t.Helper()
	if store == nil {
		store = NewMemStore()
	}
	// The listener comes first: the server's public URL is its address.
	hs := httptest.NewUnstartedServer(nil)
	cfg := Config{Store: store, DaemonToken: daemonToken, RelayToken: relayToken, AdminToken: adminToken,
		PublicURL: "http://" + hs.Listener.Addr().String(),
		Plane:     plane.Config{Entropy: rand.Reader}, TickEvery: 50 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(context.Background(), cfg)
	if err != nil {
		hs.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{t: t, srv: srv, store: store, stop: cancel, done: make(chan struct{})}
	go func() { defer close(ts.done); _ = srv.Run(ctx) }()
	hs.Config.Handler = srv.Handler()
	hs.Start()
	ts.http = hs
	t.Cleanup(ts.close)
	return ts
}

func (ts *testServer) close() {
	ts.once.Do(func() {
		ts.stop()
		<-ts.done
		ts.http.Close()
	})
}

// post sends a daemon request with the daemon bearer; path may also be a
// URL the server handed out.
func (ts *testServer) post(path, ctype string, body []byte, hdr ...string) (int, []byte) {
	ts.t.Helper()
	target := path
	if !strings.Contains(path, "://") {
		target = ts.http.URL + path
	}
	req, err := http.NewRequest("POST", target, bytes.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return ts.do(req)
}

func (ts *testServer) do(req *http.Request) (int, []byte) {
	ts.t.Helper()
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (ts *testServer) postMsg(path string, m msgp.Marshaler) (int, []byte) {
	ts.t.Helper()
	b, err := m.MarshalMsg(nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	return ts.post(path, wire.ContentTypeMsgpack, b)
}

// admin calls the operator API and decodes a JSON answer into out.
func (ts *testServer) admin(method, path string, in, out any) int {
	ts.t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, ts.http.URL+path, body)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	status, b := ts.do(req)
	if out != nil && status == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			ts.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return status
}

func idPath(pattern, id string) string { return strings.Replace(pattern, "{id}", id, 1) }

func helloBody(machine string) *wire.HelloRequest {
	one, ver := "1", "0.1.0"
	return &wire.HelloRequest{MachineID: machine, Label: machine, Tags: []string{"host=local"},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4, Workdir: "/tmp"},
		Versions:     wire.Versions{Daemon: &ver, Protocol: &one}}
}

func (ts *testServer) hello(machine string) string {
	ts.t.Helper()
	status, b := ts.postMsg(wire.PathHello, helloBody(machine))
	var resp wire.HelloResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || status != 200 || resp.WorkerID == nil {
		ts.t.Fatalf("hello: %d %v %x", status, err, b)
	}
	return *resp.WorkerID
}

func (ts *testServer) poll(worker string, timeout float64) wire.PollResponse {
	ts.t.Helper()
	status, b := ts.postMsg(wire.PathPoll, &wire.PollRequest{WorkerID: worker, TimeoutS: wire.Float(timeout)})
	var resp wire.PollResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || status != 200 {
		ts.t.Fatalf("poll: %d %v %q", status, err, b)
	}
	return resp
}

func (ts *testServer) exec(worker, cmd string, stream bool) string {
	ts.t.Helper()
	var acc operator.ExecAccepted
	if st := ts.admin("POST", idPath(operator.PathExec, worker), operator.ExecRequest{Command: cmd, Stream: stream}, &acc); st != 200 {
		ts.t.Fatalf("exec: status %d", st)
	}
	return acc.ExecID
}

// waitParked polls the loop until n requests are parked.
func (ts *testServer) waitParked(n int) {
	ts.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got int
		if err := ts.srv.Peek(context.Background(), func(p *plane.Plane) { got = p.Parked() }); err != nil {
			ts.t.Fatal(err)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("%d parked requests, want %d", got, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func decodeError(t *testing.T, b []byte) string {
	t.Helper()
	var e struct{ Error string }
	m := map[string]any{}
	if err := msgp.NewReader(bytes.NewReader(b)).ReadMapStrIntf(m); err != nil {
		if jerr := json.Unmarshal(b, &e); jerr != nil {
			t.Fatalf("error body %q is neither msgpack nor JSON: %v", b, err)
		}
		return e.Error
	}
	s, _ := m["error"].(string)
	return s
}

func TestHealthzNeedsNoBearer(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	resp, err := http.Get(ts.http.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
}

func TestBearers(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	body, _ := helloBody("m1").MarshalMsg(nil)
	cases := []struct {
		name string
		hdr  []string
		want int
	}{
		{"no bearer", []string{"Authorization", ""}, 401},
		{"wrong bearer", []string{"Authorization", "Bearer nope"}, 401},
		{"admin bearer on a daemon route", []string{"Authorization", "Bearer " + adminToken}, 401},
		{"relay token alone", []string{"Authorization", "Bearer " + relayToken}, 401},
		{"relay token with a wrong daemon bearer", []string{"Authorization", "Bearer " + relayToken, wire.HeaderDaemonAuthorization, "Bearer nope"}, 401},
		{"daemon bearer", nil, 200},
		{"relay token carrying the daemon bearer", []string{"Authorization", "Bearer " + relayToken, wire.HeaderDaemonAuthorization, "Bearer " + daemonToken}, 200},
	}
	for _, c := range cases {
		if status, b := ts.post(wire.PathHello, wire.ContentTypeMsgpack, body, c.hdr...); status != c.want {
			t.Errorf("%s: status %d (%q), want %d", c.name, status, b, c.want)
		}
	}
	req, _ := http.NewRequest("GET", ts.http.URL+operator.PathWorkers, nil)
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	if status, _ := ts.do(req); status != 401 {
		t.Errorf("daemon bearer on the operator API: %d, want 401", status)
	}
}

func TestHelloAdmissionRejectAnd422(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	id := ts.hello("m1")
	if len(id) != 24 {
		t.Errorf("worker id %q: want 24 hex digits", id)
	}
	if again := ts.hello("m1"); again != id {
		t.Errorf("same machine_id got %s then %s", id, again)
	}

	two := "2"
	h := helloBody("m2")
	h.Versions.Protocol = &two
	status, b := ts.postMsg(wire.PathHello, h)
	var resp wire.HelloResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || status != 200 || resp.Reject == nil || resp.Reject.Code != wire.RejectProtocolMismatch {
		t.Errorf("protocol 2: %d %v %+v", status, err, resp.Reject)
	}

	for _, field := range []string{"machine_id", "label", "tags", "capabilities.runners", "versions.daemon", "versions.protocol"} {
		raw := rawHelloWithout(t, field)
		status, b := ts.post(wire.PathHello, wire.ContentTypeMsgpack, raw)
		var ve wire.ValidationError
		if _, err := ve.UnmarshalMsg(b); err != nil || status != 422 || ve.Field != field {
			t.Errorf("hello without %s: %d %v %+v", field, status, err, ve)
		}
	}
}

// rawHelloWithout encodes a valid hello, then drops one key.
func rawHelloWithout(t *testing.T, path string) []byte {
	b, _ := helloBody("m9").MarshalMsg(nil)
	m := map[string]any{}
	if err := msgp.NewReader(bytes.NewReader(b)).ReadMapStrIntf(m); err != nil {
		t.Fatal(err)
	}
	parent, child, nested := strings.Cut(path, ".")
	if nested {
		delete(m[parent].(map[string]any), child)
	} else {
		delete(m, parent)
	}
	raw, err := msgp.AppendIntf(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestPollParksAndWakesOnExec(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	got := make(chan wire.PollResponse, 1)
	go func() { got <- ts.poll(w, 20) }()
	ts.waitParked(1)
	execID := ts.exec(w, "echo hi", false)
	resp := <-got
	if len(resp.Commands) != 1 || resp.Commands[0].Kind != wire.KindExec {
		t.Fatalf("woken poll: %+v", resp)
	}
	d := wire.Dispatch(resp.Commands[0]).(wire.ExecCommand)
	if d.Body.ExecID != execID || d.Body.Command != "echo hi" {
		t.Errorf("exec body %+v, want exec %s", d.Body, execID)
	}
	var st operator.ExecStatus
	ts.admin("GET", idPath(operator.PathExecStatus, execID), nil, &st)
	if st.State != plane.ExecDelivered {
		t.Errorf("exec state %q, want delivered", st.State)
	}
}

func TestPollDeadlineAnswersEmpty(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	start := time.Now()
	resp := ts.poll(w, 0.2)
	if len(resp.Commands) != 0 || time.Since(start) < 150*time.Millisecond {
		t.Errorf("poll with timeout 0.2 s: %d commands after %v", len(resp.Commands), time.Since(start))
	}
}

func TestOneExecPerPollAndSetupFIFO(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	a := ts.exec(w, "a", false)
	b := ts.exec(w, "b", false)
	for _, script := range []string{"first", "second"} {
		if st := ts.admin("POST", idPath(operator.PathSetup, w), operator.SetupRequest{Script: script}, nil); st != 200 {
			t.Fatalf("setup: %d", st)
		}
	}
	var worker operator.Worker
	ts.admin("GET", idPath(operator.PathWorker, w), nil, &worker)
	if worker.State != plane.WorkerSettingUp || worker.PendingCommands != 4 {
		t.Errorf("worker %+v: want setting_up with 4 pending", worker)
	}
	var seen []string
	for range 2 {
		for _, c := range ts.poll(w, 0).Commands {
			switch d := wire.Dispatch(c).(type) {
			case wire.ExecCommand:
				seen = append(seen, "exec "+d.Body.ExecID)
			case wire.SetupCommand:
				seen = append(seen, "setup "+d.Body.Script)
			}
		}
		seen = append(seen, "|")
	}
	want := []string{"exec " + a, "setup first", "|", "exec " + b, "setup second", "|"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("polls delivered %v, want %v", seen, want)
	}
}

func TestRunAckAndKill(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	var inv, queued operator.Invocation
	ts.admin("POST", operator.PathInvocations, operator.RunRequest{Queue: "default", Function: wire.Function{Module: "jobs", Qualname: "f"}}, &inv)
	ts.admin("POST", operator.PathInvocations, operator.RunRequest{Queue: "other", Function: wire.Function{Module: "jobs", Qualname: "g"}}, &queued)
	resp := ts.poll(w, 0)
	if len(resp.Commands) != 1 || resp.Commands[0].Kind != wire.KindRun {
		t.Fatalf("poll: %+v", resp)
	}
	if st := ts.admin("POST", idPath(operator.PathKill, inv.ID), nil, nil); st != 409 {
		t.Errorf("kill running: %d, want 409", st)
	}
	var killed operator.Invocation
	if st := ts.admin("POST", idPath(operator.PathKill, queued.ID), nil, &killed); st != 200 || killed.State != "killed" {
		t.Errorf("kill queued: %d %+v", st, killed)
	}
	ack := &wire.Ack{InvocationID: inv.ID, State: wire.StateFailed, Error: &wire.ErrorInfo{TypeName: "ValueError", Message: "bad"}, WorkerID: w}
	if status, b := ts.postMsg(wire.PathAck, ack); status != 200 {
		t.Fatalf("ack: %d %q", status, b)
	}
	var got operator.Invocation
	ts.admin("GET", idPath(operator.PathInvocation, inv.ID), nil, &got)
	if got.State != "failed" || got.Error == nil || got.Error.TypeName != "ValueError" || got.WorkerID != w {
		t.Errorf("after ack: %+v", got)
	}
}

func TestExecResultsJSONMsgpackAndDuplicates(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	x1 := ts.exec(w, "one", false)
	x2 := ts.exec(w, "two", false)
	res, _ := (&wire.ExecResult{ExitCode: 3, Stdout: "out", Stderr: "err", DurationMS: 12}).MarshalMsg(nil)
	if status, b := ts.post(ResultPathFor(x1), wire.ContentTypeMsgpack, res); status != 200 {
		t.Fatalf("msgpack result: %d %q", status, b)
	}
	js := []byte(`{"exit_code": 0.0, "stdout": "json out", "stderr": "", "duration_ms": 5.5, "result_inline": null, "result_ref": null}`)
	if status, b := ts.post(ResultPathFor(x2), wire.ContentTypeJSON, js); status != 200 || string(b) != "{}" {
		t.Fatalf("JSON result: %d %q", status, b)
	}
	again, _ := (&wire.ExecResult{ExitCode: 99, Stdout: "second"}).MarshalMsg(nil)
	if status, _ := ts.post(ResultPathFor(x1), wire.ContentTypeMsgpack, again); status != 200 {
		t.Errorf("duplicate result: %d, want 200", status)
	}
	for id, want := range map[string]string{x1: "3 out", x2: "0 json out"} {
		var st operator.ExecStatus
		ts.admin("GET", idPath(operator.PathExecStatus, id), nil, &st)
		if st.State != plane.ExecFinished || st.Result == nil || fmt.Sprintf("%d %s", st.Result.ExitCode, st.Result.Stdout) != want {
			t.Errorf("exec %s: %+v, want %s", id, st, want)
		}
	}
	if status, b := ts.post(ResultPathFor("nope"), wire.ContentTypeMsgpack, res); status != 404 || decodeError(t, b) != plane.ErrUnknownExec {
		t.Errorf("unknown exec: %d %q", status, b)
	}
	if status, b := ts.post(ResultPathFor(x2), wire.ContentTypeJSON, []byte(`{"exit_code": "zero"}`)); status != 400 || decodeError(t, b) == "" {
		t.Errorf("JSON result with a string exit code: %d %q, want 400", status, b)
	}
}

// ResultPathFor is the result route of one exec.
func ResultPathFor(execID string) string { return wire.PathExecResult(execID) }

func TestChunksInOrderAndLogLongPoll(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	x := ts.exec(w, "make", true)
	cmd := ts.poll(w, 0).Commands[0]
	sink := wire.Dispatch(cmd).(wire.ExecCommand).Body.Log
	if sink == nil || sink.StdoutURL != ts.http.URL+wire.PathExecChunk(x) {
		t.Fatalf("log sink %+v", sink)
	}
	logs := func(offset int64, wait float64) operator.LogsPage {
		var page operator.LogsPage
		path := fmt.Sprintf("%s?offset=%d&wait_s=%g", idPath(operator.PathExecLogs, x), offset, wait)
		if st := ts.admin("GET", path, nil, &page); st != 200 {
			t.Fatalf("logs: %d", st)
		}
		return page
	}
	waiting := make(chan operator.LogsPage, 1)
	go func() { waiting <- logs(0, 20) }()
	ts.waitParked(1)
	for _, part := range []string{"hello", ", ", "world"} {
		if status, b := ts.post(sink.StdoutURL, wire.ContentTypeOctets, []byte(part)); status != 200 {
			t.Fatalf("chunk: %d %q", status, b)
		}
	}
	if first := <-waiting; string(first.Data) != "hello" || first.NextOffset != 5 || first.Done {
		t.Errorf("woken log wait: %+v", first)
	}
	if page := logs(0, 0); string(page.Data) != "hello, world" || page.NextOffset != 12 {
		t.Errorf("all logs: %q next %d", page.Data, page.NextOffset)
	}
	res, _ := (&wire.ExecResult{ExitCode: 0}).MarshalMsg(nil)
	ts.post(wire.PathExecResult(x), wire.ContentTypeMsgpack, res)
	if page := logs(12, 5); !page.Done || len(page.Data) != 0 {
		t.Errorf("after result: %+v", page)
	}
}

func TestUnknownWorkerPoll404(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	status, b := ts.postMsg(wire.PathPoll, &wire.PollRequest{WorkerID: "0123456789abcdef01234567", TimeoutS: 1})
	if status != 404 || decodeError(t, b) != plane.ErrUnknownWorker {
		t.Errorf("poll of unknown worker: %d %q", status, b)
	}
}

func TestBadBodiesKeepServing(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	huge := bytes.Repeat([]byte{0x90}, MaxControlBody+1)
	cases := []struct {
		name, path string
		body       []byte
		want       int
	}{
		{"oversized hello", wire.PathHello, huge, 413},
		{"garbage hello", wire.PathHello, []byte("not msgpack at all"), 400},
		{"hello that is an array", wire.PathHello, []byte{0x91, 0x01}, 400},
		{"truncated poll", wire.PathPoll, []byte{0x86, 0xa9}, 400},
		{"garbage ack", wire.PathAck, []byte{0xc1, 0xc1}, 400},
		{"hello with trailing bytes", wire.PathHello, append(must(helloBody("m1").MarshalMsg(nil)), 0x01), 400},
		{"oversized chunk", wire.PathExecChunk("x"), bytes.Repeat([]byte("a"), MaxChunkBody+1), 413},
	}
	for _, c := range cases {
		status, b := ts.post(c.path, wire.ContentTypeMsgpack, c.body)
		if status != c.want || decodeError(t, b) == "" {
			t.Errorf("%s: %d %q, want %d with an error message", c.name, status, b, c.want)
		}
	}
	// Chunked (no Content-Length) oversize is cut off by the reader.
	req, _ := http.NewRequest("POST", ts.http.URL+wire.PathPoll, io.MultiReader(bytes.NewReader(huge)))
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	req.ContentLength = -1
	if status, _ := ts.do(req); status != 413 {
		t.Errorf("chunked oversized poll: %d, want 413", status)
	}
	ts.hello("still-serving")
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// failingStore is a MemStore whose Apply fails while it holds an error.
type failingStore struct {
	*MemStore
	mu  sync.Mutex
	err error
}

func (s *failingStore) failWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *failingStore) Apply(ctx context.Context, b plane.Batch) error {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.MemStore.Apply(ctx, b)
}

func TestStoreFailureAnswers503AndReloads(t *testing.T) {
	store := &failingStore{MemStore: NewMemStore()}
	ts := newTestServer(t, store, nil)
	w := ts.hello("m1")
	store.failWith(errors.New("disk full"))
	var acc operator.ExecAccepted
	if st := ts.admin("POST", idPath(operator.PathExec, w), operator.ExecRequest{Command: "lost"}, &acc); st != 503 {
		t.Fatalf("exec with a failing store: %d, want 503", st)
	}
	store.failWith(nil)
	// The plane was rebuilt from the store: the failed exec is not queued.
	if resp := ts.poll(w, 0); len(resp.Commands) != 0 {
		t.Errorf("poll after a failed enqueue got %d commands", len(resp.Commands))
	}
}

// loadFailingStore is a failingStore whose Load fails too, loads times.
type loadFailingStore struct {
	*failingStore
	loads int
}

func (s *loadFailingStore) Load(ctx context.Context) (plane.Snapshot, error) {
	s.mu.Lock()
	fail := s.loads > 0
	if fail {
		s.loads--
	}
	s.mu.Unlock()
	if fail {
		return plane.Snapshot{}, errors.New("read error")
	}
	return s.MemStore.Load(ctx)
}

// When the reload after a failed Apply fails too, serve does not go on
// with a core the store does not hold: it answers 503 until a reload
// succeeds, so nothing is answered 200 that is not stored (an exec's
// result retried after a 503 is stored, and there after a restart).
func TestFailedReloadRefusesUntilTheStoreReloads(t *testing.T) {
	store := &loadFailingStore{failingStore: &failingStore{MemStore: NewMemStore()}}
	ts := newTestServer(t, store, func(c *Config) { c.TickEvery = time.Hour })
	w := ts.hello("m1")
	x := ts.exec(w, "echo", false)
	if resp := ts.poll(w, 0); len(resp.Commands) != 1 {
		t.Fatalf("poll: %+v", resp)
	}
	result := &wire.ExecResult{ExitCode: 0, Stdout: "out"}
	store.failWith(errors.New("disk full"))
	store.mu.Lock()
	store.loads = 1
	store.mu.Unlock()
	if st, _ := ts.postMsg(strings.Replace(wire.PatternExecResult, "{exec_id}", x, 1), result); st != 503 {
		t.Fatalf("result with a failing store: %d, want 503", st)
	}
	store.failWith(nil)
	if st, _ := ts.postMsg(strings.Replace(wire.PatternExecResult, "{exec_id}", x, 1), result); st != 200 {
		t.Fatalf("the retried result: %d, want 200", st)
	}
	ts.close()
	ts2 := newTestServer(t, store, nil)
	var st operator.ExecStatus
	ts2.admin("GET", idPath(operator.PathExecStatus, x), nil, &st)
	if st.State != plane.ExecFinished || st.Result == nil || st.Result.Stdout != "out" {
		t.Fatalf("after a restart the exec is %s with result %+v, want finished with its result", st.State, st.Result)
	}
}

func TestRestartKeepsQueuedWork(t *testing.T) {
	store := NewMemStore()
	ts := newTestServer(t, store, nil)
	w := ts.hello("m1")
	x := ts.exec(w, "survives", false)
	ts.close()

	ts2 := newTestServer(t, store, nil)
	resp := ts2.poll(w, 0)
	if len(resp.Commands) != 1 || wire.Dispatch(resp.Commands[0]).(wire.ExecCommand).Body.ExecID != x {
		t.Fatalf("after restart: %+v", resp)
	}
}

type fakeBlobs struct{}

func (fakeBlobs) Presign(p Presign, now time.Time) (wire.PresignResponse, error) {
	if p.Op != "get" && p.Op != "put" {
		return wire.PresignResponse{}, fmt.Errorf("%w: op %q", ErrPresignInvalid, p.Op)
	}
	return wire.PresignResponse{URL: "http://127.0.0.1/v1/blobs/" + p.Key + "?sig=x", Method: strings.ToUpper(p.Op),
		Headers: map[string]string{}, ExpiresAt: wire.Int(now.Add(time.Minute).Unix())}, nil
}

func (fakeBlobs) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "blob "+r.URL.Path) })
}

func TestPresignDelegatesToBlobStore(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.Blobs = fakeBlobs{} })
	status, b := ts.postMsg("/v1/namespaces/ns1/payloads/presign", &wire.PresignRequest{Op: "get", Key: "k1"})
	var resp wire.PresignResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || status != 200 || resp.Method != "GET" || !strings.Contains(resp.URL, "/v1/blobs/k1") {
		t.Errorf("presign: %d %v %+v", status, err, resp)
	}
	if status, b := ts.postMsg("/v1/namespaces/ns1/payloads/presign", &wire.PresignRequest{Op: "delete"}); status != 400 {
		t.Errorf("bad presign: %d %q", status, b)
	}
	resp2, err := http.Get(ts.http.URL + "/v1/blobs/k1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if string(body) != "blob /v1/blobs/k1" {
		t.Errorf("blob handler: %q", body)
	}
}

// failingWriter is a connection that broke: every write fails.
type failingWriter struct{ h http.Header }

func (f *failingWriter) Header() http.Header       { return f.h }
func (f *failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }
func (f *failingWriter) WriteHeader(int)           {}
func (f *failingWriter) Flush()                    {}

func TestPollReplyThatCannotBeWrittenIsRequeued(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	x := ts.exec(w, "must not be lost", false)
	body, _ := (&wire.PollRequest{WorkerID: w, TimeoutS: 0}).MarshalMsg(nil)
	req := httptest.NewRequest("POST", wire.PathPoll, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	ts.srv.Handler().ServeHTTP(&failingWriter{h: http.Header{}}, req)

	resp := ts.poll(w, 5)
	if len(resp.Commands) != 1 || wire.Dispatch(resp.Commands[0]).(wire.ExecCommand).Body.ExecID != x {
		t.Fatalf("poll after a failed write: %+v, want exec %s again", resp.Commands, x)
	}
}

// parkPoll parks a poll of worker and returns what gives it up (its
// client leaves), which returns once the client has.
func (ts *testServer) parkPoll(worker string) (leave func()) {
	ctx, cancel := context.WithCancel(context.Background())
	body, _ := (&wire.PollRequest{WorkerID: worker, TimeoutS: 20}).MarshalMsg(nil)
	done := make(chan error, 1)
	go func() {
		_, err := benchPost(ctx, ts.http.Client(), ts.http.URL+wire.PathPoll, wire.ContentTypeMsgpack, "Bearer "+daemonToken, body)
		done <- err
	}()
	ts.waitParked(1)
	return func() { cancel(); <-done }
}

func TestAbandonedPollTakesNothing(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	ts.parkPoll(w)()
	ts.waitParked(0)
	x := ts.exec(w, "after abandon", false)
	resp := ts.poll(w, 5)
	if len(resp.Commands) != 1 || wire.Dispatch(resp.Commands[0]).(wire.ExecCommand).Body.ExecID != x {
		t.Fatalf("next poll: %+v, want exec %s", resp.Commands, x)
	}
}
