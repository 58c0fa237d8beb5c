package serverless

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/strictwire"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// store is the handler's store in this test: one state, read before and
// written after every request.
type store struct {
	t     *testing.T
	state []byte
	now   time.Time
}

var tokens = Tokens{Daemon: "daemon-secret", Admin: "admin-secret"}

func (s *store) do(method, path, bearer string, body []byte) Response {
	s.t.Helper()
	s.now = s.now.Add(time.Second)
	r, err := Handle(s.state, s.now, Request{Method: method, Path: path, Authorization: "Bearer " + bearer, Body: body}, tokens, rand.Reader)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	s.state = r.State
	return r
}

func (s *store) daemon(path string, body msgp.Marshaler) Response {
	s.t.Helper()
	raw, err := body.MarshalMsg(nil)
	if err != nil {
		s.t.Fatal(err)
	}
	r := s.do("POST", path, tokens.Daemon, raw)
	if r.Status != 200 || r.ContentType != wire.ContentTypeMsgpack {
		s.t.Fatalf("POST %s: %d %s %q", path, r.Status, r.ContentType, r.Body)
	}
	return r
}

func (s *store) admin(method, path string, body, into any) {
	s.t.Helper()
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	r := s.do(method, path, tokens.Admin, raw)
	if r.Status != 200 || r.ContentType != wire.ContentTypeJSON {
		s.t.Fatalf("%s %s: %d %s %s", method, path, r.Status, r.ContentType, r.Body)
	}
	if err := json.Unmarshal(r.Body, into); err != nil {
		s.t.Fatalf("%s %s: %v in %s", method, path, err, r.Body)
	}
}

// A worker's whole exec, each request on a plane restored from the state
// the previous one stored.
func TestExecThroughStoredState(t *testing.T) {
	s := &store{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	one, version := "1", "0.1.0"
	var hello wire.HelloResponse
	raw := s.daemon(wire.PathHello, &wire.HelloRequest{
		MachineID: "m1", Label: "box", Tags: []string{},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4},
		Versions:     wire.Versions{Daemon: &version, Protocol: &one},
	}).Body
	if _, err := hello.UnmarshalMsg(raw); err != nil || hello.WorkerID == nil {
		t.Fatalf("hello response %+v: %v", hello, err)
	}
	worker := *hello.WorkerID

	poll := &wire.PollRequest{WorkerID: worker, Queue: "default", TimeoutS: 20}
	var got wire.PollResponse
	r := s.daemon(wire.PathPoll, poll)
	if _, err := got.UnmarshalMsg(r.Body); err != nil || len(got.Commands) != 0 || !r.Parked {
		t.Fatalf("idle poll: parked %v, %+v, %v", r.Parked, got, err)
	}

	var workers []operator.Worker
	s.admin("GET", operator.PathWorkers, nil, &workers)
	if len(workers) != 1 || workers[0].ID != worker {
		t.Fatalf("workers %+v", workers)
	}
	var accepted operator.ExecAccepted
	s.admin("POST", "/v1/admin/workers/"+worker+"/exec", operator.ExecRequest{Command: "echo hello"}, &accepted)

	r = s.daemon(wire.PathPoll, poll)
	if _, err := got.UnmarshalMsg(r.Body); err != nil || len(got.Commands) != 1 || r.Parked {
		t.Fatalf("poll after the exec: parked %v, %+v, %v", r.Parked, got, err)
	}
	var ex wire.Exec
	if _, err := ex.UnmarshalMsg(got.Commands[0].Body); err != nil || ex.ExecID != accepted.ExecID || ex.Command != "echo hello" {
		t.Fatalf("exec %+v: %v", ex, err)
	}
	s.daemon(wire.PathExecResult(ex.ExecID), &wire.ExecResult{ExitCode: 0, Stdout: "hello\n"})

	var status operator.ExecStatus
	s.admin("GET", "/v1/admin/execs/"+ex.ExecID, nil, &status)
	if status.State != "finished" || status.Result == nil || status.Result.Stdout != "hello\n" {
		t.Fatalf("exec status %+v", status)
	}
}

func TestRefusals(t *testing.T) {
	s := &store{t: t}
	for _, c := range []struct {
		method, path, bearer string
		body                 []byte
		status               int
	}{
		{"GET", operator.PathWorkers, "wrong", nil, 401},
		{"GET", "/v1/admin/nothing", tokens.Admin, nil, 404},
		{"GET", "/v1/admin/x/execs/e1", tokens.Admin, nil, 404},
		{"POST", "/v1/daemon/exec/a/b/result", tokens.Daemon, nil, 404},
		{"POST", wire.PathPoll, tokens.Daemon, []byte{0xc1}, 400},
		{"POST", wire.PathPoll, "wrong", must((&wire.PollRequest{WorkerID: "w1", Queue: "default"}).MarshalMsg(nil)), 401},
		{"POST", wire.PathHello, tokens.Daemon, msgp.AppendMapHeader(nil, 0), 422},
	} {
		if r := s.do(c.method, c.path, c.bearer, c.body); r.Status != c.status {
			t.Errorf("%s %s: %d %q, want %d", c.method, c.path, r.Status, r.Body, c.status)
		}
	}
	if len(s.state) != 0 {
		t.Errorf("refusals stored a state: %s", s.state)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A worker that stops polling is lost on a later request, though every
// request restores the plane: health counts from when the state began,
// not from the restore. A worker that keeps polling stays active.
func TestSilentWorkerIsLost(t *testing.T) {
	s := &store{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	one, version := "1", "0.1.0"
	hello := func(machine string) string {
		var h wire.HelloResponse
		raw := s.daemon(wire.PathHello, &wire.HelloRequest{
			MachineID: machine, Label: machine, Tags: []string{},
			Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4},
			Versions:     wire.Versions{Daemon: &version, Protocol: &one},
		}).Body
		if _, err := h.UnmarshalMsg(raw); err != nil || h.WorkerID == nil {
			t.Fatalf("hello %s: %+v %v", machine, h, err)
		}
		return *h.WorkerID
	}
	silent, busy := hello("silent"), hello("busy")
	for range 12 { // two minutes of busy's polls, 9 s apart
		s.now = s.now.Add(9 * time.Second)
		s.daemon(wire.PathPoll, &wire.PollRequest{WorkerID: busy, Queue: "default", TimeoutS: 20})
	}
	var workers []operator.Worker
	s.admin("GET", operator.PathWorkers, nil, &workers)
	states := map[string]string{}
	for _, w := range workers {
		states[w.ID] = w.State
	}
	if states[silent] != "lost" || states[busy] != "active" {
		t.Fatalf("after two minutes: silent %q, busy %q; want lost and active", states[silent], states[busy])
	}
}

// TestReaskStoresNothing: re-asking a parked poll a moment later (as
// plane.js does within its second) leaves the stored state as it was;
// a poll long after the last stored sign of life stores it.
func TestReaskStoresNothing(t *testing.T) {
	s := &store{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	one, version := "1", "0.1.0"
	var h wire.HelloResponse
	if _, err := h.UnmarshalMsg(s.daemon(wire.PathHello, &wire.HelloRequest{
		MachineID: "m", Label: "m", Tags: []string{},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4},
		Versions:     wire.Versions{Daemon: &version, Protocol: &one},
	}).Body); err != nil || h.WorkerID == nil {
		t.Fatalf("hello: %+v %v", h, err)
	}
	poll := &wire.PollRequest{WorkerID: *h.WorkerID, Queue: "default", TimeoutS: 20}
	s.daemon(wire.PathPoll, poll)
	before := s.state
	for range 9 {
		s.now = s.now.Add(100 * time.Millisecond)
		s.daemon(wire.PathPoll, poll)
	}
	if !bytes.Equal(s.state, before) {
		t.Error("re-asking a parked poll rewrote the stored state")
	}
	s.now = s.now.Add(plane.DefaultLostAfter / 2)
	s.daemon(wire.PathPoll, poll)
	if bytes.Equal(s.state, before) {
		t.Error("a poll half a lost window later did not store the worker's sign of life")
	}
}

// A stored state of another shape is refused with the reason, not read as
// a fresh plane: nothing stored is silently dropped.
func TestForeignStateRefused(t *testing.T) {
	_, err := Handle([]byte(`{"workers":[{"id":"w1"}]}`), time.Now(), Request{Method: "GET", Path: operator.PathWorkers,
		Authorization: "Bearer " + tokens.Admin}, tokens, rand.Reader)
	if err == nil || !strings.Contains(err.Error(), `decode state: json: unknown field "workers"`) {
		t.Fatalf("a bare snapshot as the state: %v", err)
	}
}

// What the serverless plane sends a daemon reads under a strictly typed
// decoder written from docs/protocol.md's tables (internal/strictwire,
// another msgpack library), not only under our own: the hello response,
// an empty poll, a poll bringing an exec and the exec's body.
func TestBodiesFitAStrictPeer(t *testing.T) {
	s := &store{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	one, version := "1", "0.1.0"
	raw := s.daemon(wire.PathHello, &wire.HelloRequest{
		MachineID: "strict", Label: "strict", Tags: []string{},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4},
		Versions:     wire.Versions{Daemon: &version, Protocol: &one},
	}).Body
	var hello strictwire.HelloResponse
	if err := strictwire.Decode(raw, &hello); err != nil || hello.WorkerID == nil {
		t.Fatalf("hello response: %v %+v\n%x", err, hello, raw)
	}
	poll := &wire.PollRequest{WorkerID: *hello.WorkerID, Queue: "default", TimeoutS: 20}
	var empty strictwire.PollResponse
	if raw := s.daemon(wire.PathPoll, poll).Body; strictwire.Decode(raw, &empty) != nil || len(empty.Commands) != 0 {
		t.Fatalf("empty poll response: %+v\n%x", empty, raw)
	}
	var accepted operator.ExecAccepted
	s.admin("POST", "/v1/admin/workers/"+*hello.WorkerID+"/exec", operator.ExecRequest{Command: "true"}, &accepted)
	var got strictwire.PollResponse
	raw = s.daemon(wire.PathPoll, poll).Body
	if err := strictwire.Decode(raw, &got); err != nil || len(got.Commands) != 1 {
		t.Fatalf("poll response with the exec: %v %+v\n%x", err, got, raw)
	}
	if _, err := strictwire.DecodeBody(got.Commands[0]); err != nil {
		t.Fatalf("the exec's body: %v", err)
	}
}
