package planeserver

import (
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/nymphd/nymph/internal/strictwire"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"
)

// strict decodes a body the server sent as a daemon written from the
// tables of docs/protocol.md would, failing the test when it cannot.
func strict[T any](t *testing.T, what string, b []byte) *T {
	t.Helper()
	v := new(T)
	if err := strictwire.Decode(b, v); err != nil {
		t.Fatalf("%s: a strictly typed daemon cannot read it: %v\nbody %x", what, err, b)
	}
	return v
}

// pollAll polls worker until a poll brings no command, strictly decoding
// every poll response and every command body on the way.
func (ts *testServer) pollAll(t *testing.T, worker string) map[string][]any {
	t.Helper()
	bodies := map[string][]any{}
	for range 50 {
		status, b := ts.postMsg(wire.PathPoll, &wire.PollRequest{WorkerID: worker, Queue: "default", TimeoutS: 0})
		if status != 200 {
			t.Fatalf("poll: %d %q", status, b)
		}
		resp := strict[strictwire.PollResponse](t, "poll response", b)
		if len(resp.Commands) == 0 {
			return bodies
		}
		for _, c := range resp.Commands {
			body, err := strictwire.DecodeBody(c)
			if err != nil {
				t.Fatalf("a strictly typed daemon skips this command: %v\nbody %x", err, []byte(c.Body))
			}
			bodies[c.Kind] = append(bodies[c.Kind], body)
		}
	}
	t.Fatal("polls kept bringing commands")
	return nil
}

func strictHello(machine string, runners ...string) *wire.HelloRequest {
	h := helloBody(machine)
	h.Capabilities.Runners = runners
	return h
}

// Every body nymph serve sends a daemon, produced by the real routes and
// decoded by a second msgpack implementation into structs typed from the
// tables of docs/protocol.md: a required key dropped (exec env, stdin), a whole number
// sent as a float (session_ttl_s), a relative stdout_url, or a nil where
// the table has no null fails here.
func TestEveryBodyServeSendsFitsTheProtocolTypes(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) {
		c.Blobs = fakeBlobs{}
		c.Plane.TargetVersion = "9.9.9"
		c.Plane.KeyRotationMaxAgeS = 2592000
	})

	// Hello: admitted, refused, malformed.
	status, b := ts.postMsg(wire.PathHello, strictHello("m1", "process", "docker", "slurm", "kube"))
	hello := strict[strictwire.HelloResponse](t, "hello response", b)
	if status != 200 || hello.WorkerID == nil || hello.Reject != nil || hello.SessionTTLS != plane.SessionTTLS ||
		hello.KeyRotationMaxAgeS != 2592000 || hello.ServerTimeEpochS == nil || *hello.ServerTimeEpochS < 1e9 {
		t.Fatalf("hello: %d %+v", status, hello)
	}
	w := *hello.WorkerID
	two := "2"
	bad := helloBody("m2")
	bad.Versions.Protocol = &two
	_, b = ts.postMsg(wire.PathHello, bad)
	if r := strict[strictwire.HelloResponse](t, "hello reject", b); r.Reject == nil || r.Reject.Code != wire.RejectProtocolMismatch {
		t.Errorf("protocol 2: %+v", r)
	}
	status, b = ts.post(wire.PathHello, wire.ContentTypeMsgpack, rawHelloWithout(t, "label"))
	if ve := strict[strictwire.ValidationError](t, "422 body", b); status != 422 || ve.Field != "label" || ve.Error == "" {
		t.Errorf("hello without label: %d %+v", status, ve)
	}

	// Error bodies of the other refusals.
	for _, c := range []struct {
		name, path string
		body       []byte
		hdr        []string
		want       int
	}{
		{"no bearer", wire.PathPoll, must((&wire.PollRequest{WorkerID: w}).MarshalMsg(nil)), []string{"Authorization", ""}, 401},
		{"relayed without a daemon bearer", wire.PathPoll, must((&wire.PollRequest{WorkerID: w}).MarshalMsg(nil)), []string{"Authorization", "Bearer " + relayToken}, 401},
		{"unknown worker", wire.PathPoll, must((&wire.PollRequest{WorkerID: "0123456789abcdef01234567"}).MarshalMsg(nil)), nil, 404},
		{"garbage poll", wire.PathPoll, []byte{0xc1}, nil, 400},
		{"unknown exec result", wire.PathExecResult("nope"), must((&wire.ExecResult{}).MarshalMsg(nil)), nil, 404},
		{"unsigned key rotation", wire.PathKeys, must((&wire.KeyRotationRequest{WorkerID: w, NewPublicKey: "k"}).MarshalMsg(nil)), nil, 401},
		{"oversized hello", wire.PathHello, make([]byte, MaxControlBody+1), nil, 413},
	} {
		status, b := ts.post(c.path, wire.ContentTypeMsgpack, c.body, c.hdr...)
		if e := strict[strictwire.ErrorBody](t, c.name, b); status != c.want || e.Error == "" {
			t.Errorf("%s: %d %+v, want %d with a message", c.name, status, e, c.want)
		}
	}

	// An empty poll: commands is an empty array, not nil or absent.
	if got := ts.pollAll(t, w); len(got) != 0 {
		t.Fatalf("fresh worker got commands %v", got)
	}

	// Runs, with every run_config shape, while the worker is active.
	for _, rc := range []wire.RunConfig{
		{},
		{Runner: "docker", Image: "img:1", Docker: &wire.DockerConfig{Env: map[string]string{"A": "1"}, Volumes: []string{"/d:/d"}}},
		{Runner: "slurm", Slurm: &wire.SlurmConfig{Partition: "gpu", Nodes: "2", PollIntervalS: ptr(wire.Number(5))}},
		{Runner: "kube", Image: "img:2", Kube: &wire.KubeConfig{Namespace: "lab", PollIntervalS: ptr(wire.Number(2.5))}},
	} {
		req := operator.RunRequest{Queue: "default", Function: wire.Function{Module: "jobs", Qualname: "f"}, RunConfig: rc}
		if st := ts.admin("POST", operator.PathInvocations, req, nil); st != 200 {
			t.Fatalf("run: %d", st)
		}
	}
	script := "echo scripted"
	ts.admin("POST", operator.PathInvocations, operator.RunRequest{Queue: "default", Script: &script, ArgsBlob: []byte{1, 2}}, nil)
	sha := strings.Repeat("cd", 32)
	byRef := &wire.PayloadRef{Bucket: "default", Key: "sha256-" + sha, Size: 400000, ContentType: wire.ContentTypeOctets, SHA256: &sha}
	ts.admin("POST", operator.PathInvocations, operator.RunRequest{Queue: "default", Function: wire.Function{Module: "jobs", Qualname: "big"}, PayloadRef: byRef}, nil)
	runs := ts.pollAll(t, w)[wire.KindRun]
	if len(runs) != 6 {
		t.Fatalf("%d runs delivered, want 6", len(runs))
	}
	refs := 0
	for _, r := range runs {
		run := r.(*strictwire.Run)
		if run.InvocationID == "" || run.ArgsBlob == nil {
			t.Errorf("run body %+v", run)
		}
		if p := run.PayloadRef; p != nil {
			refs++
			if len(run.ArgsBlob) != 0 || p.Bucket != "default" || p.Size != 400000 || p.SHA256 == nil || *p.SHA256 != sha || p.ContentType != wire.ContentTypeOctets {
				t.Errorf("run by payload_ref: args %d bytes, ref %+v", len(run.ArgsBlob), p)
			}
		}
	}
	if refs != 1 {
		t.Errorf("%d runs carried a payload_ref, want 1", refs)
	}

	// Every other kind: execs as `nymph ctl exec` sends them (streamed by
	// default, --no-stream, with everything set), setups, an update, the
	// two kinds without a body.
	stdin, workdir, timeout := "input", "/srv", 60.0
	for _, req := range []operator.ExecRequest{
		{Command: "uname -a", Stream: true},
		{Command: "uname -a"},
		{Command: "cat", Env: map[string]string{"K": "V"}, Stdin: &stdin, Workdir: &workdir, TimeoutS: &timeout, Stream: true, FlushMS: 50, FlushBytes: 1024},
		{Command: "inline", PayloadInline: []byte("small payload")},
		{Command: "by-ref", PayloadRef: byRef},
	} {
		if st := ts.admin("POST", idPath(operator.PathExec, w), req, nil); st != 200 {
			t.Fatalf("exec: %d", st)
		}
	}
	for _, req := range []operator.SetupRequest{{Script: "true"}, {Script: "true", Sudo: true, RefreshCapabilities: true, Name: "base"}} {
		ts.admin("POST", idPath(operator.PathSetup, w), req, nil)
	}
	ts.admin("POST", idPath(operator.PathUpdate, w), operator.UpdateRequest{Version: "9.9.9", URL: "https://dl.example/nymph", SHA256: strings.Repeat("ab", 32)}, nil)
	ts.admin("POST", idPath(operator.PathReset, w), struct{}{}, nil)
	ts.admin("POST", idPath(operator.PathRotateKey, w), struct{}{}, nil)
	got := ts.pollAll(t, w)
	counts := map[string]int{}
	for kind, bodies := range got {
		counts[kind] = len(bodies)
	}
	want := map[string]int{wire.KindExec: 5, wire.KindSetup: 2, wire.KindOTAUpdate: 1, wire.KindResetBackoff: 1, wire.KindRotateKey: 1}
	for kind, n := range want {
		if counts[kind] != n {
			t.Errorf("%d %s commands delivered, want %d (all: %v)", counts[kind], kind, n, counts)
		}
	}
	for _, e := range got[wire.KindExec] {
		ex := e.(*strictwire.Exec)
		if ex.Log != nil && ex.Log.StdoutURL != ts.http.URL+wire.PathExecChunk(ex.ExecID) {
			t.Errorf("exec %s: stdout_url %q, want the absolute URL of its chunk route", ex.ExecID, ex.Log.StdoutURL)
		}
		if ex.Command == "cat" && (ex.Env["K"] != "V" || ex.Stdin != "input" || ex.TimeoutS == nil || *ex.TimeoutS != 60 || ex.Log.FlushMS != 50) {
			t.Errorf("full exec %+v (log %+v)", ex, ex.Log)
		}
		if ex.Command == "inline" && (string(ex.PayloadInline) != "small payload" || ex.PayloadRef != nil) {
			t.Errorf("inline payload exec %+v", ex)
		}
		if ex.Command == "by-ref" && (len(ex.PayloadInline) != 0 || ex.PayloadRef == nil || ex.PayloadRef.Size != 400000 || ex.PayloadRef.SHA256 == nil) {
			t.Errorf("payload_ref exec %+v (ref %+v)", ex, ex.PayloadRef)
		}
	}

	// Hibernate, on a worker of its own (it ends a poll's list).
	h := ts.hello("m3")
	if st := ts.admin("POST", idPath(operator.PathHibernate, h), operator.HibernateRequest{UntilEpochS: 1764413600.4}, nil); st != 200 {
		t.Fatalf("hibernate: %d", st)
	}
	hib := ts.pollAll(t, h)[wire.KindHibernate]
	if len(hib) != 1 || hib[0].(*strictwire.Hibernate).UntilEpochS != 1764413601 {
		t.Errorf("hibernate bodies %+v, want until 1764413601 (rounded up)", hib)
	}

	// Presign, and the empty bodies of ack, exec result and chunk.
	_, b = ts.postMsg("/v1/namespaces/ns1/payloads/presign", &wire.PresignRequest{Op: "get", Key: "k1"})
	if p := strict[strictwire.PresignResponse](t, "presign response", b); p.URL == "" || p.Headers == nil || p.ExpiresAt == 0 {
		t.Errorf("presign: %+v", p)
	}
	x := ts.exec(w, "echo", true)
	ts.pollAll(t, w)
	inv := runs[0].(*strictwire.Run).InvocationID
	for _, c := range []struct {
		name, path, ctype string
		body              []byte
	}{
		{"ack", wire.PathAck, wire.ContentTypeMsgpack, must((&wire.Ack{InvocationID: inv, State: wire.StateSucceeded, WorkerID: w}).MarshalMsg(nil))},
		{"chunk", ts.http.URL + wire.PathExecChunk(x), wire.ContentTypeOctets, []byte("out")},
		{"exec result", wire.PathExecResult(x), wire.ContentTypeMsgpack, must((&wire.ExecResult{}).MarshalMsg(nil))},
		{"event", wire.PathEvent, wire.ContentTypeMsgpack, msgp.AppendMapHeader(nil, 0)},
	} {
		status, b := ts.post(c.path, c.ctype, c.body)
		if status != 200 {
			t.Errorf("%s: %d %q", c.name, status, b)
		}
		strict[struct{}](t, c.name+" reply", b)
	}
}

// A fraction is kept where it means something: a 2.5 s timeout goes out
// as float64 (a daemon typing timeout_s f64 reads it; u64 cannot), a 60 s
// one as an integer.
func TestExecTimeoutKeepsItsFraction(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	for _, timeout := range []float64{2.5, 60} {
		if st := ts.admin("POST", idPath(operator.PathExec, w), operator.ExecRequest{Command: "sleep 9", TimeoutS: &timeout}, nil); st != 200 {
			t.Fatalf("exec: %d", st)
		}
		var body map[string]any
		if err := msgpack.Unmarshal(ts.poll(w, 0).Commands[0].Body, &body); err != nil {
			t.Fatal(err)
		}
		switch v := body["timeout_s"].(type) {
		case float64:
			if v != timeout || timeout == math.Trunc(timeout) {
				t.Errorf("timeout %v went out as float64 %v", timeout, v)
			}
		case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
			if timeout != math.Trunc(timeout) {
				t.Errorf("timeout %v went out as integer %v", timeout, v)
			}
		default:
			t.Errorf("timeout %v went out as %T", timeout, v)
		}
	}
}

// The stdout_url is absolute, built from the public URL (path prefix and
// all); a server without one, or with one that is not an http(s) URL,
// does not start.
func TestStdoutURLIsAbsolute(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.PublicURL = "https://plane.example:8443/nymph/" })
	w := ts.hello("m1")
	x := ts.exec(w, "echo hi", true)
	d := wire.Dispatch(ts.poll(w, 0).Commands[0]).(wire.ExecCommand)
	if want := "https://plane.example:8443/nymph" + wire.PathExecChunk(x); d.Body.Log == nil || d.Body.Log.StdoutURL != want {
		t.Errorf("stdout_url %+v, want %s", d.Body.Log, want)
	}
	for _, bad := range []string{"", "plane.example:8443", "ftp://plane.example", "https://", "https://plane.example/?q=1", "https://u:p@plane.example"} {
		_, err := New(t.Context(), Config{Store: NewMemStore(), AdminToken: adminToken, PublicURL: bad, Plane: plane.Config{Entropy: strings.NewReader(strings.Repeat("x", 1<<10))}})
		if err == nil || !strings.Contains(err.Error(), "public URL") {
			t.Errorf("public URL %q: %v, want a refusal naming the public URL", bad, err)
		}
	}
}

// started_at has no type in the protocol (docs/protocol.md,
// "PollRequest"): float or integer epoch seconds and an RFC 3339 string
// (chrono's default) are all a valid poll; anything else is a 400 that
// says what is accepted.
func TestPollAcceptsStartedAtForms(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")
	poll := func(startedAt any) (int, []byte) {
		b := msgp.AppendMapHeader(nil, 5)
		for _, kv := range []struct {
			k string
			v any
		}{
			{"worker_id", w}, {"queue", "default"}, {"timeout_s", 0.0}, {"cursor", nil},
			{"invocations", []any{map[string]any{"invocation_id": "i1", "state": "running", "started_at": startedAt, "exit_code": nil, "stdout_tail": ""}}},
		} {
			var err error
			if b, err = msgp.AppendIntf(msgp.AppendString(b, kv.k), kv.v); err != nil {
				t.Fatal(err)
			}
		}
		return ts.post(wire.PathPoll, wire.ContentTypeMsgpack, b)
	}
	for _, at := range []any{1764410000.5, int64(1764410000), "2025-11-29T09:53:20.5Z", "2025-11-29T10:53:20+01:00", "2025-11-29T09:53:20.123456"} {
		if status, b := poll(at); status != 200 {
			t.Errorf("started_at %#v: %d %q", at, status, b)
		}
	}
	status, b := poll("yesterday")
	if msg := decodeError(t, b); status != http.StatusBadRequest || !strings.Contains(msg, "RFC 3339") {
		t.Errorf("started_at \"yesterday\": %d %q", status, msg)
	}
}

// A raw relay frame carries no headers, so a protocol "1" daemon behind a
// relay cannot present its bearer: with TrustRelayDaemons the relay's
// token vouches for it; without, it is refused with a message that says
// how to allow it. A wrong daemon bearer is refused either way.
func TestTrustRelayDaemons(t *testing.T) {
	body := must(helloBody("m1").MarshalMsg(nil))
	relayed := []string{"Authorization", "Bearer " + relayToken}
	for _, trust := range []bool{false, true} {
		ts := newTestServer(t, nil, func(c *Config) { c.TrustRelayDaemons = trust })
		status, b := ts.post(wire.PathHello, wire.ContentTypeMsgpack, body, relayed...)
		if trust {
			if r := strict[strictwire.HelloResponse](t, "trusted relayed hello", b); status != 200 || r.WorkerID == nil {
				t.Errorf("trusted relay, raw frame: %d %+v", status, r)
			}
		} else if msg := decodeError(t, b); status != 401 || !strings.Contains(msg, "--trust-relay-daemons") || !strings.Contains(msg, wire.HeaderDaemonAuthorization) {
			t.Errorf("untrusted relay, raw frame: %d %q, want 401 naming the header and the flag", status, msg)
		}
		for _, c := range []struct {
			name string
			hdr  []string
			want int
		}{
			{"relay token with a wrong daemon bearer", append(relayed, wire.HeaderDaemonAuthorization, "Bearer nope"), 401},
			{"relay token with the daemon bearer", append(relayed, wire.HeaderDaemonAuthorization, "Bearer "+daemonToken), 200},
			{"no bearer", []string{"Authorization", ""}, 401},
			{"wrong bearer", []string{"Authorization", "Bearer nope"}, 401},
			{"admin bearer", []string{"Authorization", "Bearer " + adminToken}, 401},
			{"daemon bearer", nil, 200},
		} {
			if status, b := ts.post(wire.PathHello, wire.ContentTypeMsgpack, body, c.hdr...); status != c.want {
				t.Errorf("trust=%v, %s: %d %q, want %d", trust, c.name, status, b, c.want)
			}
		}
		// The relay's token vouches on every daemon route, not only hello.
		if status, _ := ts.post(wire.PathPoll, wire.ContentTypeMsgpack, must((&wire.PollRequest{WorkerID: ts.hello("m1")}).MarshalMsg(nil)), relayed...); (status == 200) != trust {
			t.Errorf("trust=%v: relayed raw poll %d", trust, status)
		}
	}
}

func ptr[T any](v T) *T { return &v }
