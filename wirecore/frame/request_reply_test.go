package frame

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

func TestEndpointPath(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{"/v1/daemon/poll", "/v1/daemon/poll", false},
		{"https://cp.test/v1/daemon/exec/x/chunk", "/v1/daemon/exec/x/chunk", false},
		{"http://127.0.0.1:9/base/v1/daemon/ack", "/base/v1/daemon/ack", false},
		{"https://cp.test/v1/daemon/exec/x/chunk?sig=1", "", true},
		{"/v1/daemon/poll#frag", "", true},
		{"https://cp.test", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := EndpointPath(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("EndpointPath(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestIDs(t *testing.T) {
	entropy := bytes.NewReader([]byte("0123456789abcdefghij")) // two boots' worth
	ids := NewIDs(time.Unix(1700000000, 0), entropy)
	a, b := ids.Next(), ids.Next()
	if a == b || !ValidID(a) || !ValidID(b) {
		t.Errorf("ids %q, %q", a, b)
	}
	if other := NewIDs(time.Unix(1700000000, 0), entropy).Next(); other == a {
		t.Errorf("two boots made the same id %q", a)
	}
}

// A request AppendRequest writes is one frame whose envelope the relay's
// half reads back: the URL's path, the id, and an empty body for none.
func TestAppendRequestIsWhatTheRelayReads(t *testing.T) {
	b, err := AppendRequest(nil, wire.RelayRequest{Endpoint: "https://cp.test/v1/daemon/ack", ID: "boot-1", ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	p, rest, err := Split(b)
	if err != nil || len(rest) != 0 {
		t.Fatalf("Split = %d bytes left, %v", len(rest), err)
	}
	env, err := ReadEnvelope(p, len(p))
	if err != nil || env.Endpoint != "/v1/daemon/ack" || env.ID != "boot-1" || env.ContentType != "text/plain" || env.BodyLen != 0 {
		t.Fatalf("ReadEnvelope = %+v, %v", env, err)
	}
	if _, err := AppendRequest(nil, wire.RelayRequest{Endpoint: "/v1/daemon/poll?x=1"}); err == nil {
		t.Fatal("an endpoint with a query was written")
	}
}

func TestParseReply(t *testing.T) {
	enc := func(r wire.RelayReply) []byte { b, _ := r.MarshalMsg(nil); return b }
	r, mine, err := ParseReply(enc(wire.RelayReply{ID: "a-1", Status: 204}), "a-1")
	if !mine || err != nil || r.Status != 204 || r.Body == nil {
		t.Errorf("own reply: %+v, %v, %v", r, mine, err)
	}
	if _, mine, _ := ParseReply(enc(wire.RelayReply{ID: "a-0", Status: 200}), "a-1"); mine {
		t.Error("a reply to another request was taken")
	}
	_, mine, err = ParseReply(enc(wire.RelayReply{ID: "a-1", RelayError: &wire.RelayReplyError{Message: "refused"}}), "a-1")
	var re *RelayError
	if !mine || !errors.As(err, &re) || re.Message != "refused" {
		t.Errorf("status 0 with relay_error: %v, %v", mine, err)
	}
}

func TestParseRawReply(t *testing.T) {
	enc := func(f wire.RelayFailure) []byte {
		b, _ := (&wire.RelayErrorReply{RelayError: f}).MarshalMsg(nil)
		return b
	}
	r, err := ParseRawReply([]byte("\x81\xa2ok\xc3"))
	if err != nil || r.Status != 200 || string(r.Body) != "\x81\xa2ok\xc3" {
		t.Errorf("an upstream body: %+v, %v", r, err)
	}
	r, err = ParseRawReply(enc(wire.RelayFailure{Status: 503, Message: "shutting down", Body: []byte("x")}))
	if err != nil || r.Status != 503 || string(r.Body) != "x" {
		t.Errorf("a relay_error with a status: %+v, %v", r, err)
	}
	_, err = ParseRawReply(enc(wire.RelayFailure{Message: "connection refused"}))
	if err == nil || !strings.Contains(err.Error(), "upstream unreachable: connection refused") {
		t.Errorf("a relay_error of status 0: %v", err)
	}
}

// A refusal the relay made itself (a status, its message, no upstream
// body) reaches the daemon as a body of the shape a control plane refuses
// with, so its reason is logged; an upstream body is kept as it came.
func TestRelayRefusalKeepsItsMessage(t *testing.T) {
	wantBody := func(t *testing.T, what string, r Reply, status int, msg string) {
		t.Helper()
		var v wire.ValidationError
		if _, err := v.UnmarshalMsg(r.Body); err != nil || r.Status != status || v.Error != wire.ErrRelayRefused || v.Message != msg {
			t.Errorf("%s: status %d, body %+v (%v); want %d with {%s, %q}", what, r.Status, v, err, status, wire.ErrRelayRefused, msg)
		}
	}
	idReply, _ := (&wire.RelayReply{ID: "a-1", Status: 400, RelayError: &wire.RelayReplyError{Message: "endpoint /v1/x not allowed"}}).MarshalMsg(nil)
	r, mine, err := ParseReply(idReply, "a-1")
	if !mine || err != nil {
		t.Fatalf("id reply: %v, %v", mine, err)
	}
	wantBody(t, "id reply", r, 400, "endpoint /v1/x not allowed")

	raw, _ := (&wire.RelayErrorReply{RelayError: wire.RelayFailure{Status: 413, Message: "frame of 300 MiB"}}).MarshalMsg(nil)
	r, err = ParseRawReply(raw)
	if err != nil {
		t.Fatal(err)
	}
	wantBody(t, "raw reply", r, 413, "frame of 300 MiB")

	upstream, _ := (&wire.ValidationError{Error: "invalid", Field: "worker_id"}).MarshalMsg(nil)
	withBody, _ := (&wire.RelayReply{ID: "a-1", Status: 422, Body: upstream, RelayError: &wire.RelayReplyError{Message: "upstream answered 422"}}).MarshalMsg(nil)
	if r, _, _ := ParseReply(withBody, "a-1"); string(r.Body) != string(upstream) {
		t.Errorf("an upstream body was replaced: %q", r.Body)
	}
}
