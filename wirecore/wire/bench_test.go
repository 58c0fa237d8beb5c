package wire_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nymphd/nymph/gen/goldens/vectors"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"
)

// benchMessages are the hot-path messages the benchmarks compare: a hello,
// a poll request with three invocations, a poll response with one exec.
func benchMessages(b *testing.B) []struct {
	name  string
	value vectors.Message
	fresh func() vectors.Message
} {
	b.Helper()
	hello := vector(b, "hello_request")
	poll := vector(b, "poll_request")
	return []struct {
		name  string
		value vectors.Message
		fresh func() vectors.Message
	}{
		{"HelloRequest", hello.Value, hello.New},
		{"PollRequest3", poll.Value, poll.New},
		{"PollResponseExec", vectors.PollResponseOneExec(), func() vectors.Message { return new(wire.PollResponse) }},
	}
}

// peerEncoder and peerDecoder use the same field names as our codecs.
func peerEncoder(buf *bytes.Buffer) *msgpack.Encoder {
	enc := msgpack.NewEncoder(buf)
	enc.SetCustomStructTag("msg")
	return enc
}

func peerDecoder(r *bytes.Reader) *msgpack.Decoder {
	dec := msgpack.NewDecoder(r)
	dec.SetCustomStructTag("msg")
	return dec
}

// BenchmarkEncode: ours appends into a reused buffer; the peers write into
// a reused bytes.Buffer.
func BenchmarkEncode(b *testing.B) {
	for _, m := range benchMessages(b) {
		b.Run(m.name+"/msgp", func(b *testing.B) {
			buf, _ := m.value.MarshalMsg(nil)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = m.value.MarshalMsg(buf[:0])
			}
		})
		b.Run(m.name+"/vmihailenco", func(b *testing.B) {
			var buf bytes.Buffer
			enc := peerEncoder(&buf)
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := enc.Encode(m.value); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(m.name+"/json", func(b *testing.B) {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			v := jsonValue(b, m.value)
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := enc.Encode(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode: each codec decodes its own encoding of the same value
// into a reused value, as a poll loop would.
func BenchmarkDecode(b *testing.B) {
	for _, m := range benchMessages(b) {
		b.Run(m.name+"/msgp", func(b *testing.B) {
			data, _ := m.value.MarshalMsg(nil)
			v := m.fresh()
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.UnmarshalMsg(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		// Into a fresh value every time: every string is allocated.
		b.Run(m.name+"/msgp-fresh", func(b *testing.B) {
			data, _ := m.value.MarshalMsg(nil)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.fresh().UnmarshalMsg(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The peer decodes the protocol's own bytes (ours), as a peer on the
		// other end of the wire would, keeping a command body raw as we do.
		b.Run(m.name+"/vmihailenco", func(b *testing.B) {
			data, _ := m.value.MarshalMsg(nil)
			r := bytes.NewReader(data)
			dec := peerDecoder(r)
			v := peerValue(m.fresh())
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(data)
				dec.Reset(r)
				dec.SetCustomStructTag("msg")
				if err := dec.Decode(v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(m.name+"/json", func(b *testing.B) {
			data, err := json.Marshal(jsonValue(b, m.value))
			if err != nil {
				b.Fatal(err)
			}
			v := jsonValue(b, m.fresh())
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := json.Unmarshal(data, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// peerPollResponse is PollResponse as a peer in another language holds
// it: a command's body stays raw (json.RawMessage for a JSON peer,
// msgpack.RawMessage for a vmihailenco one) until dispatched, as our
// Command.Body stays raw msgpack.
type peerPollResponse[Raw any] struct {
	Commands           []peerCommand[Raw] `msg:"commands" json:"commands"`
	TargetNymphVersion *string            `msg:"target_nymph_version" json:"target_nymph_version"`
}

type peerCommand[Raw any] struct {
	ID   string `msg:"id" json:"id"`
	Kind string `msg:"kind" json:"kind"`
	Body Raw    `msg:"body" json:"body"`
}

// jsonValue returns what encoding/json encodes or decodes for a message;
// for a PollResponse, its JSON peer with each body converted to JSON.
func jsonValue(b *testing.B, m vectors.Message) any {
	p, ok := m.(*wire.PollResponse)
	if !ok {
		return m
	}
	var out peerPollResponse[json.RawMessage]
	out.TargetNymphVersion = p.TargetNymphVersion
	for _, c := range p.Commands {
		var body bytes.Buffer
		if len(c.Body) > 0 {
			if _, err := msgp.UnmarshalAsJSON(&body, c.Body); err != nil {
				b.Fatal(err)
			}
		}
		out.Commands = append(out.Commands, peerCommand[json.RawMessage]{c.ID, c.Kind, json.RawMessage(body.Bytes())})
	}
	return &out
}

// peerValue is the value a vmihailenco peer decodes the protocol bytes of
// v into: v itself, except where our Go type keeps raw msgpack.
func peerValue(v vectors.Message) any {
	if _, ok := v.(*wire.PollResponse); ok {
		return new(peerPollResponse[msgpack.RawMessage])
	}
	return v
}
