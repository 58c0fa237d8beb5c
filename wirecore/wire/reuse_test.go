package wire_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nymphd/nymph/gen/goldens/vectors"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// TestDecodeIntoReusedValue: decoding into a value that already holds a
// message gives the new message — strings that changed are replaced, those
// that did not are kept — and nothing decoded aliases the input buffer
// but a SharedBlob, which shares it by design (TestSharedBlobSharesInput).
func TestDecodeIntoReusedValue(t *testing.T) {
	for _, v := range vectors.All() {
		t.Run(v.Name, func(t *testing.T) {
			in := readGolden(t, v.Name+".msgpack")
			got := v.New()
			for range 2 {
				if _, err := got.UnmarshalMsg(in); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(v.Value, got, valueOpts); diff != "" {
				t.Errorf("second decode into the same value (-want +got):\n%s", diff)
			}
			for i := range in { // a reused input buffer gets overwritten
				in[i] = 0xc1
			}
			if diff := cmp.Diff(v.Value, got, valueOpts, cmpopts.IgnoreTypes(wire.SharedBlob{})); diff != "" {
				t.Errorf("second decode into the same value (-want +got):\n%s", diff)
			}
		})
	}

	// Two different poll requests into one value, as a control plane would.
	first := vector(t, "poll_request").Value.(*wire.PollRequest)
	second := *first
	second.WorkerID = "another-worker"
	second.Queue = "cpu"
	second.Invocations = []wire.InvocationStatus{{InvocationID: "inv-09", State: wire.StateRunning, StartedAt: 7}}
	var reused wire.PollRequest
	for _, m := range []*wire.PollRequest{first, &second, first} {
		b, _ := m.MarshalMsg(nil)
		if _, err := reused.UnmarshalMsg(b); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(m, &reused, valueOpts); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	}
}

// TestSharedBlobSharesInput: an ack's result decoded from bin or str is
// the input's own bytes (a control plane's 16 MiB ack is not copied at
// decode), and one written as an array of ints, or read from a stream, is
// a copy.
func TestSharedBlobSharesInput(t *testing.T) {
	in, _ := (&wire.Ack{InvocationID: "i", State: wire.StateSucceeded, ResultBlob: wire.SharedBlob("result")}).MarshalMsg(nil)
	var a wire.Ack
	if _, err := a.UnmarshalMsg(in); err != nil {
		t.Fatal(err)
	}
	at := bytes.LastIndex(in, []byte("result")) // the value, after the key "result_blob"
	in[at] = 'R'
	if string(a.ResultBlob) != "Result" {
		t.Errorf("decoded from bin, the result is %q: a copy, not the input's bytes", a.ResultBlob)
	}

	var fromStr wire.SharedBlob
	str := msgp.AppendString(nil, "text")
	if _, err := fromStr.UnmarshalMsg(str); err != nil {
		t.Fatal(err)
	}
	str[1] = 'T'
	if string(fromStr) != "Text" {
		t.Errorf("decoded from str, the result is %q: a copy, not the input's bytes", fromStr)
	}

	var fromArray wire.SharedBlob
	arr := msgp.AppendInt(msgp.AppendInt(msgp.AppendArrayHeader(nil, 2), 104), 105)
	if _, err := fromArray.UnmarshalMsg(arr); err != nil || string(fromArray) != "hi" {
		t.Fatalf("array of ints decoded as %q, %v", fromArray, err)
	}

	var streamed wire.Ack
	in, _ = (&wire.Ack{InvocationID: "i", State: wire.StateSucceeded, ResultBlob: wire.SharedBlob("result")}).MarshalMsg(nil)
	if err := streamed.DecodeMsg(msgp.NewReader(bytes.NewReader(in))); err != nil || string(streamed.ResultBlob) != "result" {
		t.Fatalf("streamed ack: result %q, %v", streamed.ResultBlob, err)
	}
}

// TestDecodeRefusesHugeCounts: an array or map that announces more entries
// than allowed is refused before anything is allocated for it.
func TestDecodeRefusesHugeCounts(t *testing.T) {
	huge := func(prefix byte) []byte { return []byte{prefix, 0x7f, 0xff, 0xff, 0xff, 0x00} }
	cases := []struct {
		name string
		msg  msgp.Unmarshaler
		in   []byte
	}{
		{"invocations", new(wire.PollRequest), append(msgp.AppendString([]byte{0x81}, "invocations"), huge(0xdd)...)},
		{"commands", new(wire.PollResponse), append(msgp.AppendString([]byte{0x81}, "commands"), huge(0xdd)...)},
		{"tags", new(wire.HelloRequest), append(msgp.AppendString([]byte{0x81}, "tags"), huge(0xdd)...)},
		{"config", new(wire.HelloResponse), append(msgp.AppendString([]byte{0x81}, "config"), huge(0xdf)...)},
		{"env", new(wire.Exec), append(msgp.AppendString([]byte{0x81}, "env"), huge(0xdf)...)},
		{"headers", new(wire.RelayRequest), append(msgp.AppendString([]byte{0x81}, "headers"), huge(0xdf)...)},
		{"struct map", new(wire.Ack), huge(0xdf)},
		{"blob array", new(wire.Ack), append(msgp.AppendString([]byte{0x81}, "result_blob"), huge(0xdd)...)},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := c.msg.UnmarshalMsg(c.in)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: a count of 2^31-1 was accepted", c.name)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("%s: allocated %d bytes before refusing", c.name, grew)
		}
	}
}
