package daemon

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// StepInto decides exactly what Step decides, appends after what buf
// held, and leaves the machine's own buffer alone: two machines fed the
// same events, one through each, emit the same effects.
func TestStepIntoMatchesStep(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hostname = "stepinto"
	cfg.Extensions = wire.KnownExtensions[:]
	a := New(cfg, rand.New(rand.NewPCG(1, 2)))
	b := New(cfg, rand.New(rand.NewPCG(1, 2)))
	body, err := (&wire.Exec{ExecID: "e1", Command: "true"}).MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, cursor := "w1", "1"
	events := []Event{
		Boot{},
		HelloResult{Status: 200, Response: &wire.HelloResponse{WorkerID: &id,
			Config: map[string]msgp.Raw{wire.ConfigExtensions: wire.EncodeExtensions(wire.KnownExtensions[:])}}},
		PollResult{Seq: 1, Status: 200, Response: &wire.PollResponse{
			Commands: []wire.Command{{ID: "c1", Kind: wire.KindExec, Body: body}}, Cursor: &cursor}},
		ExecFinished{ExecID: "e1", Result: wire.ExecResult{DurationMS: 2}},
		ResultPosted{ExecID: "e1", Status: 200},
		Signal{Kind: SignalTerm},
	}
	mark := ReportState{State: "kept"}
	buf := []Effect{mark}
	now, total := epoch, 0
	for i, ev := range events {
		now = now.Add(time.Second)
		want := a.Step(now, ev)
		buf = b.StepInto(buf[:1], now, ev)
		if buf[0] != Effect(mark) {
			t.Fatalf("event %d (%T): StepInto overwrote the buffer's head", i, ev)
		}
		if got := buf[1:]; !reflect.DeepEqual([]Effect(got), want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("event %d (%T): StepInto gave\n%#v\nStep gave\n%#v", i, ev, got, want)
		}
		total += len(want)
	}
	if total < len(events) {
		t.Fatalf("%d effects from %d events: the sequence tests little", total, len(events))
	}
	if b.out != nil {
		t.Errorf("StepInto left the machine a buffer of %d", len(b.out))
	}
}
