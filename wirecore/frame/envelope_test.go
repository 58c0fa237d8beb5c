package frame

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/nymphd/nymph/wirecore/wire"
)

func marshal(t testing.TB, m msgp.Marshaler) []byte {
	t.Helper()
	b, err := m.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kv builds a msgpack map with keys in the given order; each value is
// already encoded.
func kv(pairs ...any) []byte {
	b := msgp.AppendMapHeader(nil, uint32(len(pairs)/2))
	for i := 0; i < len(pairs); i += 2 {
		b = msgp.AppendString(b, pairs[i].(string))
		b = append(b, pairs[i+1].([]byte)...)
	}
	return b
}

func str(s string) []byte { return msgp.AppendString(nil, s) }
func bin(s string) []byte { return msgp.AppendBytes(nil, []byte(s)) }
func num(n int64) []byte  { return msgp.AppendInt64(nil, n) }
func nilValue() []byte    { return msgp.AppendNil(nil) }
func strMap(k, v string) []byte {
	return msgp.AppendString(msgp.AppendString(msgp.AppendMapHeader(nil, 1), k), v)
}

// bodyOf returns the envelope's body bytes out of payload.
func bodyOf(payload []byte, e Envelope) string {
	return string(payload[e.BodyOffset : e.BodyOffset+e.BodyLen])
}

type envCase struct {
	name    string
	payload []byte
	want    Envelope // offsets ignored; body compared by content
	body    string
	wantErr error
}

func envCases(t testing.TB) []envCase {
	// A seed daemon's envelope, as a second msgpack implementation writes a
	// struct {endpoint, body}.
	seed, err := msgpack.Marshal(&struct {
		Endpoint string `msgpack:"endpoint"`
		Body     []byte `msgpack:"body"`
	}{"/v1/daemon/hello", []byte{0x81, 0xa1, 'k', 1}})
	if err != nil {
		t.Fatal(err)
	}
	big := string(bytes.Repeat([]byte("b"), 70000))
	return []envCase{
		{name: "ours, full", payload: marshal(t, &wire.RelayRequest{
			Endpoint: "/v1/daemon/poll", ID: "01J-7", ContentType: "text/plain",
			Headers: map[string]string{"X-LS-Timestamp": "1"}, Body: []byte("poll body"),
		}), want: Envelope{Endpoint: "/v1/daemon/poll", ID: "01J-7", ContentType: "text/plain",
			Headers: map[string]string{"X-LS-Timestamp": "1"}}, body: "poll body"},
		{name: "ours, minimal", payload: marshal(t, &wire.RelayRequest{Endpoint: "/v1/daemon/ack"}),
			want: Envelope{Endpoint: "/v1/daemon/ack"}},
		{name: "ours, large body", payload: marshal(t, &wire.RelayRequest{Endpoint: "/v1/daemon/event", Body: []byte(big)}),
			want: Envelope{Endpoint: "/v1/daemon/event"}, body: big},
		{name: "seed struct", payload: seed, want: Envelope{Endpoint: "/v1/daemon/hello"}, body: "\x81\xa1k\x01"},
		{name: "unknown keys skipped", payload: kv("x", kv("deep", msgp.AppendArrayHeader(nil, 0)), "endpoint", str("/e"), "n", num(5), "body", bin("B")),
			want: Envelope{Endpoint: "/e"}, body: "B"},
		{name: "nil optionals", payload: kv("endpoint", str("/e"), "headers", nilValue(), "id", nilValue(), "content_type", nilValue(), "body", bin("")),
			want: Envelope{Endpoint: "/e"}},
		{name: "body as str", payload: kv("endpoint", str("/e"), "body", str("text")), want: Envelope{Endpoint: "/e"}, body: "text"},
		{name: "keys after body", payload: kv("body", bin("B1"), "id", str("i"), "endpoint", str("/e"), "headers", strMap("X-LS-A", "v")),
			want: Envelope{Endpoint: "/e", ID: "i", Headers: map[string]string{"X-LS-A": "v"}}, body: "B1"},
		{name: "not a map", payload: msgp.AppendArrayHeader(nil, 0), wantErr: &EnvelopeError{Reason: "not a map"}},
		{name: "nil payload", payload: nilValue(), wantErr: &EnvelopeError{Reason: "not a map"}},
		{name: "empty payload", payload: nil, wantErr: &EnvelopeError{Reason: "truncated"}},
		{name: "no endpoint", payload: kv("body", bin("x")), wantErr: &EnvelopeError{Key: "endpoint", Reason: "missing or empty"}},
		{name: "empty endpoint", payload: kv("endpoint", str(""), "body", bin("x")), wantErr: &EnvelopeError{Key: "endpoint", Reason: "missing or empty"}},
		{name: "no body", payload: kv("endpoint", str("/e")), wantErr: &EnvelopeError{Key: "body", Reason: "missing"}},
		{name: "endpoint not str", payload: kv("endpoint", num(1), "body", bin("x")), wantErr: &EnvelopeError{Key: "endpoint", Reason: "not a string"}},
		{name: "endpoint nil", payload: kv("endpoint", nilValue(), "body", bin("x")), wantErr: &EnvelopeError{Key: "endpoint", Reason: "not a string"}},
		{name: "body not bin", payload: kv("endpoint", str("/e"), "body", num(3)), wantErr: &EnvelopeError{Key: "body", Reason: "not bin or str"}},
		{name: "body array of ints", payload: kv("endpoint", str("/e"), "body", msgp.AppendArrayHeader(nil, 0)), wantErr: &EnvelopeError{Key: "body", Reason: "not bin or str"}},
		{name: "header value not str", payload: kv("endpoint", str("/e"), "headers", append(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "k"), num(1)...), "body", bin("")),
			wantErr: &EnvelopeError{Key: "headers", Reason: "header value is not a string"}},
		{name: "id not str", payload: kv("id", num(1), "endpoint", str("/e"), "body", bin("")), wantErr: &EnvelopeError{Key: "id", Reason: "not a string"}},
		{name: "repeated body", payload: kv("endpoint", str("/e"), "body", bin("a"), "body", bin("b")), wantErr: &EnvelopeError{Key: "body", Reason: "repeated"}},
		{name: "key not str", payload: append(msgp.AppendInt64(msgp.AppendMapHeader(nil, 1), 1), nilValue()...), wantErr: &EnvelopeError{Reason: "key is not a string"}},
		{name: "trailing bytes", payload: append(kv("endpoint", str("/e"), "body", bin("x")), 0xc0), wantErr: &EnvelopeError{Reason: "1 bytes after the map"}},
		{name: "body past end", payload: kv("endpoint", str("/e"), "body", []byte{0xc6, 0, 0, 1, 0}), wantErr: &EnvelopeError{Key: "body", Reason: "runs past the end of the payload"}},
		{name: "map announces more keys", payload: append(msgp.AppendMapHeader(nil, 3), kv("endpoint", str("/e"), "body", bin("x"))[1:]...),
			wantErr: &EnvelopeError{Reason: "truncated"}},
	}
}

func TestReadEnvelope(t *testing.T) {
	for _, tt := range envCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadEnvelope(tt.payload, len(tt.payload))
			if diff := cmp.Diff(tt.wantErr, err); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if err != nil {
				return
			}
			if b := bodyOf(tt.payload, got); b != tt.body {
				t.Errorf("body = %.40q, want %.40q", b, tt.body)
			}
			got.BodyOffset, got.BodyLen = 0, 0
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("envelope (-want +got):\n%s", diff)
			}
		})
	}
}

// Reading from a growing prefix, as a relay does from a pipe, must end in
// the same answer as reading the whole payload, each *ShortError asking for
// more than it was given and no more than the payload holds.
func TestReadEnvelopeFromPrefixes(t *testing.T) {
	for _, tt := range envCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			size := len(tt.payload)
			full, fullErr := ReadEnvelope(tt.payload, size)
			// Every cut through the head, then a sample through the body.
			for k := 0; k <= size; k++ {
				if k > 512 && k%997 != 0 && k != size {
					continue
				}
				checkPrefix(t, tt.payload, k, full, fullErr)
			}
			// The loop a relay runs: read what it asks for, retry.
			k := 0
			for {
				env, err := ReadEnvelope(tt.payload[:k], size)
				var short *ShortError
				if !errors.As(err, &short) {
					if diff := cmp.Diff(full, env); diff != "" || !cmp.Equal(fullErr, err) {
						t.Fatalf("retry loop ended with %v, %v; full read %v, %v", env, err, full, fullErr)
					}
					break
				}
				k = short.Need
			}
		})
	}
}

func checkPrefix(t *testing.T, payload []byte, k int, full Envelope, fullErr error) {
	t.Helper()
	env, err := ReadEnvelope(payload[:k], len(payload))
	var short *ShortError
	if errors.As(err, &short) {
		if short.Need <= k || short.Need > len(payload) {
			t.Fatalf("prefix %d of %d: Need %d", k, len(payload), short.Need)
		}
		return
	}
	if !cmp.Equal(fullErr, err) || !cmp.Equal(full, env) {
		t.Fatalf("prefix %d of %d: %+v, %v; full read %+v, %v", k, len(payload), env, err, full, fullErr)
	}
}

// A streaming relay holds only the head: the body is located, not needed.
func TestReadEnvelopeNeedsOnlyTheHead(t *testing.T) {
	body := make([]byte, 1<<20)
	payload := marshal(t, &wire.RelayRequest{Endpoint: "/v1/daemon/result-chunk", ID: "x1", Body: body})
	env, err := ReadEnvelope(payload[:64], len(payload))
	if err != nil {
		t.Fatal(err)
	}
	if env.BodyLen != len(body) || env.BodyOffset+env.BodyLen != len(payload) || env.ID != "x1" {
		t.Errorf("envelope %+v for a %d-byte payload", env, len(payload))
	}
}

// A long unknown value before the body is asked for whole, not byte by
// byte, so a relay does not re-read the head once per byte.
func TestReadEnvelopeAsksForALongUnknownValueAtOnce(t *testing.T) {
	payload := kv("pad", bin(string(make([]byte, 5000))), "endpoint", str("/e"), "body", bin("x"))
	_, err := ReadEnvelope(payload[:20], len(payload))
	var short *ShortError
	if !errors.As(err, &short) || short.Need < 5000 {
		t.Fatalf("err = %v, want a ShortError covering the padding", err)
	}
}

// Keys after a large body ask for the whole body, so a relay can see the
// cost and refuse.
func TestReadEnvelopeKeysAfterBodyAskForTheBody(t *testing.T) {
	payload := kv("endpoint", str("/e"), "body", bin(string(make([]byte, 1000))), "id", str("late"))
	_, err := ReadEnvelope(payload[:100], len(payload))
	var short *ShortError
	if !errors.As(err, &short) || short.Need < 1000 {
		t.Fatalf("err = %v, want a ShortError covering the body", err)
	}
}
