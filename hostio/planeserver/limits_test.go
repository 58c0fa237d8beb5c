package planeserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// A hello whose map count is huge — five bytes announcing 2^32-1 entries,
// or 2^24, or 2^20 — is a 400, answered at once, without the server
// allocating for the count.
func TestHelloAnnouncingAHugeCountIs400(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	for _, body := range [][]byte{
		{0xdf, 0xff, 0xff, 0xff, 0xff},
		{0xdf, 0x01, 0x00, 0x00, 0x00},
		{0xdf, 0x00, 0x10, 0x00, 0x00},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		status, b := ts.post(wire.PathHello, wire.ContentTypeMsgpack, body)
		runtime.ReadMemStats(&after)
		if status != http.StatusBadRequest || !strings.Contains(decodeError(t, b), "malformed hello") || time.Since(start) > 2*time.Second {
			t.Fatalf("hello %x: %d %q after %s, want a prompt 400", body, status, b, time.Since(start))
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
			t.Fatalf("hello %x: %d bytes allocated, want at most 8 MiB", body, got)
		}
	}
	ts.hello("still-serving")
}

// validation decodes a 422 body, msgpack or JSON.
func validation(t *testing.T, b []byte, asJSON bool) wire.ValidationError {
	t.Helper()
	var v wire.ValidationError
	var err error
	if asJSON {
		err = json.Unmarshal(b, &v)
	} else {
		_, err = v.UnmarshalMsg(b)
	}
	if err != nil {
		t.Fatalf("422 body %q: %v", b, err)
	}
	return v
}

// A field past its limit is a 422 {error, field, message} in the
// request's encoding.
func TestFieldsPastTheirLimitsAre422NamingTheField(t *testing.T) {
	ts := newTestServer(t, nil, nil)
	w := ts.hello("m1")

	huge := helloBody(strings.Repeat("m", 900<<10))
	huge.Label = "huge"
	status, b := ts.postMsg(wire.PathHello, huge)
	if v := validation(t, b, false); status != 422 || v.Error != wire.InvalidTooLong || v.Field != "machine_id" ||
		!strings.Contains(v.Message, fmt.Sprintf("at most %d", wire.MaxIDBytes)) {
		t.Fatalf("900 KB machine_id: %d %+v", status, v)
	}
	badTag := helloBody("m2")
	badTag.Tags = []string{"ok=1", "k=\xff\xfe"}
	status, b = ts.postMsg(wire.PathHello, badTag)
	if v := validation(t, b, false); status != 422 || v.Error != wire.InvalidUTF8 || v.Field != "tags" {
		t.Fatalf("invalid UTF-8 tag: %d %+v", status, v)
	}
	status, b = ts.postMsg(wire.PathPoll, &wire.PollRequest{WorkerID: w, Queue: strings.Repeat("q", wire.MaxQueueBytes+1)})
	if v := validation(t, b, false); status != 422 || v.Field != "queue" {
		t.Fatalf("long queue: %d %+v", status, v)
	}
	status, b = ts.postMsg(wire.PathAck, &wire.Ack{InvocationID: "inv\x1b[2J", State: wire.StateFailed})
	if v := validation(t, b, false); status != 422 || v.Error != wire.InvalidCharacter || v.Field != "invocation_id" {
		t.Fatalf("ack id with an escape: %d %+v", status, v)
	}
	long := strings.Repeat("x", wire.MaxIDBytes+1)
	status, b = ts.post(wire.PathExecResult(long), wire.ContentTypeJSON, []byte(`{"exit_code": 0}`))
	if v := validation(t, b, true); status != 422 || v.Field != "exec_id" {
		t.Fatalf("JSON result for a long exec id: %d %+v", status, v)
	}
	// Nothing refused was registered.
	var workers []json.RawMessage
	if st := ts.admin("GET", "/v1/admin/workers", nil, &workers); st != 200 || len(workers) != 1 {
		t.Fatalf("workers after refusals: %d %d, want only m1", st, len(workers))
	}
}

// The worker limit: a new machine past it is 503 with Retry-After and a
// body that says what to raise; a known machine is still admitted.
func TestWorkerLimitIs503WithRetryAfter(t *testing.T) {
	ts := newTestServer(t, nil, func(c *Config) { c.Plane.MaxWorkers = 1 })
	ts.hello("m1")
	body, _ := helloBody("m2").MarshalMsg(nil)
	req, _ := http.NewRequest("POST", ts.http.URL+wire.PathHello, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+daemonToken)
	req.Header.Set("Content-Type", wire.ContentTypeMsgpack)
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if v := validation(t, b, false); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != fmt.Sprint(plane.WorkerLimitRetryAfterS) ||
		v.Error != plane.ErrWorkerLimit || !strings.Contains(v.Message, "--max-workers") {
		t.Fatalf("a second machine: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), v)
	}
	ts.hello("m1")
}
