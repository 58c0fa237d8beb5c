package wire_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/gen/goldens/vectors"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// message is a pointer to a wire message type T.
type message[T any] interface {
	*T
	vectors.Message
}

// seedDecoder adds the golden bytes of every vector of type T, plain and
// with unknown keys injected, to the corpus.
func seedDecoder[T any, P message[T]](f *testing.F) {
	n := 0
	for _, v := range vectors.All() {
		if _, ok := v.Value.(P); !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", v.Name+".msgpack"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		aug, _ := injectUnknown(f, b, v.Fields)
		f.Add(aug)
		n++
	}
	if n == 0 {
		f.Fatalf("no golden vector of type %T", P(nil))
	}
}

// fuzzDecoder checks, for any input: decoding never panics; when it
// succeeds, the value encodes, and decoding that encoding gives the same
// value back (decode(encode(decode(x))) == decode(x)).
func fuzzDecoder[T any, P message[T]](f *testing.F) {
	seedDecoder[T, P](f)
	f.Fuzz(func(t *testing.T, data []byte) {
		first := P(new(T))
		if _, err := first.UnmarshalMsg(data); err != nil {
			return
		}
		enc, err := first.MarshalMsg(nil)
		if err != nil {
			t.Fatalf("encode a decoded value: %v", err)
		}
		second := P(new(T))
		rest, err := second.UnmarshalMsg(enc)
		if err != nil {
			t.Fatalf("decode our own encoding %x: %v", enc, err)
		}
		if len(rest) != 0 {
			t.Fatalf("%d bytes left after our own encoding", len(rest))
		}
		if diff := cmp.Diff(first, second, valueOpts); diff != "" {
			t.Fatalf("round trip changed the value (-first +second):\n%s", diff)
		}
	})
}

func FuzzHelloRequest(f *testing.F)        { fuzzDecoder[wire.HelloRequest](f) }
func FuzzHelloResponse(f *testing.F)       { fuzzDecoder[wire.HelloResponse](f) }
func FuzzValidationError(f *testing.F)     { fuzzDecoder[wire.ValidationError](f) }
func FuzzPollRequest(f *testing.F)         { fuzzDecoder[wire.PollRequest](f) }
func FuzzPollResponse(f *testing.F)        { fuzzDecoder[wire.PollResponse](f) }
func FuzzAck(f *testing.F)                 { fuzzDecoder[wire.Ack](f) }
func FuzzExecResult(f *testing.F)          { fuzzDecoder[wire.ExecResult](f) }
func FuzzPresignRequest(f *testing.F)      { fuzzDecoder[wire.PresignRequest](f) }
func FuzzPresignResponse(f *testing.F)     { fuzzDecoder[wire.PresignResponse](f) }
func FuzzPayloadRef(f *testing.F)          { fuzzDecoder[wire.PayloadRef](f) }
func FuzzKeyRotationRequest(f *testing.F)  { fuzzDecoder[wire.KeyRotationRequest](f) }
func FuzzKeyRotationResponse(f *testing.F) { fuzzDecoder[wire.KeyRotationResponse](f) }
func FuzzRelayRequest(f *testing.F)        { fuzzDecoder[wire.RelayRequest](f) }
func FuzzRelayReply(f *testing.F)          { fuzzDecoder[wire.RelayReply](f) }
func FuzzRelayErrorReply(f *testing.F)     { fuzzDecoder[wire.RelayErrorReply](f) }
func FuzzHibernate(f *testing.F)           { fuzzDecoder[wire.Hibernate](f) }
func FuzzSetup(f *testing.F)               { fuzzDecoder[wire.Setup](f) }
func FuzzExec(f *testing.F)                { fuzzDecoder[wire.Exec](f) }
func FuzzOTAUpdate(f *testing.F)           { fuzzDecoder[wire.OTAUpdate](f) }
func FuzzRun(f *testing.F)                 { fuzzDecoder[wire.Run](f) }
func FuzzCancel(f *testing.F)              { fuzzDecoder[wire.Cancel](f) }

// reencode encodes the typed body of a directive; false for directives
// without one.
func reencode(t *testing.T, d wire.Directive) ([]byte, bool) {
	t.Helper()
	var enc []byte
	var err error
	switch x := d.(type) {
	case wire.HibernateCommand:
		enc, err = x.Body.MarshalMsg(nil)
	case wire.SetupCommand:
		enc, err = x.Body.MarshalMsg(nil)
	case wire.ExecCommand:
		enc, err = x.Body.MarshalMsg(nil)
	case wire.OTAUpdateCommand:
		enc, err = x.Body.MarshalMsg(nil)
	case wire.RunCommand:
		enc, err = x.Body.MarshalMsg(nil)
	case wire.CancelCommand:
		enc, err = x.Body.MarshalMsg(nil)
	default:
		return nil, false
	}
	if err != nil {
		t.Fatalf("encode a dispatched body: %v", err)
	}
	return enc, true
}

// FuzzDispatch: any kind and body gives a directive (never a panic); a
// typed body re-encoded and dispatched again gives the same directive.
func FuzzDispatch(f *testing.F) {
	var resp wire.PollResponse
	b, err := os.ReadFile(filepath.Join("testdata", "poll_response.msgpack"))
	if err != nil {
		f.Fatal(err)
	}
	if _, err := resp.UnmarshalMsg(b); err != nil {
		f.Fatal(err)
	}
	for _, c := range resp.Commands {
		f.Add(c.Kind, []byte(c.Body))
	}
	for _, v := range vectors.All() {
		if len(v.Name) > 8 && v.Name[:8] == "command_" {
			b, err := os.ReadFile(filepath.Join("testdata", v.Name+".msgpack"))
			if err != nil {
				f.Fatal(err)
			}
			aug, _ := injectUnknown(f, b, v.Fields)
			kind := v.Name[8:]
			for _, k := range []string{wire.KindHibernate, wire.KindSetup, wire.KindExec, wire.KindOTAUpdate, wire.KindRun, wire.KindCancel} {
				if len(kind) >= len(k) && kind[:len(k)] == k {
					f.Add(k, aug)
				}
			}
		}
	}
	f.Add("setup", []byte(mapBody("script", "true", "sudo", nil)))
	f.Fuzz(func(t *testing.T, kind string, body []byte) {
		d := wire.Dispatch(wire.Command{ID: "f", Kind: kind, Body: body})
		if d == nil || d.CommandID() != "f" || d.CommandKind() != kind {
			t.Fatalf("directive %#v for kind %q", d, kind)
		}
		if u, ok := d.(wire.Unknown); ok && u.Reason == "" {
			t.Fatalf("Unknown without a reason: %#v", u)
		}
		enc, ok := reencode(t, d)
		if !ok {
			return
		}
		again := wire.Dispatch(wire.Command{ID: "f", Kind: kind, Body: enc})
		if diff := cmp.Diff(d, again, valueOpts); diff != "" {
			t.Fatalf("dispatch of the re-encoded body differs (-first +again):\n%s", diff)
		}
	})
}

// FuzzPlaneConfig: whatever a plane puts in a config map, reading its
// extensions and its live values never panics, agrees only to known
// extensions, and takes only values ParseLiveConfig accepts.
func FuzzPlaneConfig(f *testing.F) {
	f.Add(wire.ConfigExtensions, []byte(wire.EncodeExtensions([]string{"cancel", "x"})))
	f.Add(wire.ConfigWaitMaxS, []byte(wire.EncodeLiveConfig(wire.ConfigWaitMaxS, wire.LiveValue{Number: 2.5})))
	f.Add(wire.ConfigLogLevel, []byte(wire.EncodeLiveConfig(wire.ConfigLogLevel, wire.LiveValue{Level: "debug"})))
	f.Add(wire.ConfigMaxInvocations, []byte{0xdc, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, key string, raw []byte) {
		for _, e := range wire.ConfigExtensionsOf(map[string]msgp.Raw{wire.ConfigExtensions: raw}) {
			if !slices.Contains(wire.KnownExtensions[:], e) {
				t.Fatalf("agreed to unknown extension %q", e)
			}
		}
		v, err := wire.DecodeLiveConfig(key, raw)
		if err != nil {
			return
		}
		s := string(v.Level)
		if s == "" {
			s = strconv.FormatFloat(v.Number, 'f', -1, 64)
		}
		if _, err := wire.ParseLiveConfig(key, s); err != nil {
			t.Fatalf("decoded %q = %+v, which ParseLiveConfig refuses: %v", key, v, err)
		}
		_ = wire.ParseCursor(&key)
	})
}
