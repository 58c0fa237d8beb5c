package wire_test

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Every msgpack encoding of a number a peer may choose.
func numberEncodings(t *testing.T) map[string][]byte {
	t.Helper()
	return map[string][]byte{
		"fixint 20":   {0x14},
		"uint8 200":   {0xcc, 200},
		"uint64 20":   {0xcf, 0, 0, 0, 0, 0, 0, 0, 20},
		"int8 -3":     {0xd0, 0xfd},
		"int64 20":    {0xd3, 0, 0, 0, 0, 0, 0, 0, 20},
		"float64 20":  msgp.AppendFloat64(nil, 20),
		"float32 2.5": msgp.AppendFloat32(nil, 2.5),
		"float64 0.5": msgp.AppendFloat64(nil, 0.5),
		"nil":         {0xc0},
	}
}

func TestFloatAcceptsAnyNumber(t *testing.T) {
	want := map[string]wire.Float{
		"fixint 20": 20, "uint8 200": 200, "uint64 20": 20, "int8 -3": -3, "int64 20": 20,
		"float64 20": 20, "float32 2.5": 2.5, "float64 0.5": 0.5, "nil": 0,
	}
	for name, b := range numberEncodings(t) {
		var f wire.Float
		rest, err := f.UnmarshalMsg(b)
		if err != nil || len(rest) != 0 || f != want[name] {
			t.Errorf("%s: got %v, %v, %d left; want %v", name, f, err, len(rest), want[name])
		}
		var viaReader wire.Float
		if err := msgp.Decode(bytesReader(b), &viaReader); err != nil || viaReader != want[name] {
			t.Errorf("%s via Reader: %v, %v", name, viaReader, err)
		}
	}
	if _, err := new(wire.Float).UnmarshalMsg(msgp.AppendString(nil, "20")); err == nil {
		t.Error("a string decoded as Float")
	}
}

func TestIntAcceptsWholeFloats(t *testing.T) {
	want := map[string]wire.Int{
		"fixint 20": 20, "uint8 200": 200, "uint64 20": 20, "int8 -3": -3, "int64 20": 20,
		"float64 20": 20, "nil": 0,
	}
	for name, b := range numberEncodings(t) {
		var i wire.Int
		_, err := i.UnmarshalMsg(b)
		w, whole := want[name]
		if whole && (err != nil || i != w) {
			t.Errorf("%s: got %v, %v; want %v", name, i, err, w)
		}
		if !whole && err == nil {
			t.Errorf("%s: fractional number decoded as Int %v", name, i)
		}
	}
	refuse := map[string][]byte{
		"uint64 max": msgp.AppendUint64(nil, math.MaxUint64),
		"2^63":       msgp.AppendFloat64(nil, 9223372036854775808),
		"-2^64":      msgp.AppendFloat64(nil, -18446744073709551616),
		"NaN":        msgp.AppendFloat64(nil, math.NaN()),
		"+Inf":       msgp.AppendFloat64(nil, math.Inf(1)),
		"string":     msgp.AppendString(nil, "1"),
	}
	for name, b := range refuse {
		var i wire.Int
		if _, err := i.UnmarshalMsg(b); err == nil {
			t.Errorf("%s decoded as Int %d", name, i)
		}
	}
	var lo wire.Int
	if _, err := lo.UnmarshalMsg(msgp.AppendFloat64(nil, -9223372036854775808)); err != nil || lo != math.MinInt64 {
		t.Errorf("-2^63: %d, %v", lo, err)
	}
}

// A Number goes out as an integer whenever its value is whole: a peer that
// typed the field u64 refuses a float, while one that typed it f64 reads an
// integer too.
func TestNumberSendsWholeValuesAsIntegers(t *testing.T) {
	cases := []struct {
		in     wire.Number
		intish bool
	}{
		{86400, true}, {0, true}, {-3, true}, {1764410000, true}, {wire.Number(math.Copysign(0, -1)), true},
		{2.5, false}, {0.2, false}, {1 << 63, false}, {-1 << 64, false},
		{wire.Number(math.NaN()), false}, {wire.Number(math.Inf(1)), false},
	}
	for _, c := range cases {
		b, err := c.in.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		var w bytes.Buffer
		mw := msgp.NewWriter(&w)
		if err := c.in.EncodeMsg(mw); err != nil || mw.Flush() != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, w.Bytes()) {
			t.Errorf("%v: MarshalMsg %x, EncodeMsg %x", c.in, b, w.Bytes())
		}
		if len(b) > c.in.Msgsize() {
			t.Errorf("%v: %d bytes, Msgsize %d", c.in, len(b), c.in.Msgsize())
		}
		typ := msgp.NextType(b)
		if got := typ == msgp.IntType || typ == msgp.UintType; got != c.intish {
			t.Errorf("%v encoded as %v (%x)", c.in, typ, b)
		}
		var back wire.Number
		if _, err := back.UnmarshalMsg(b); err != nil || (back != c.in && c.in == c.in) {
			t.Errorf("%v round-tripped to %v, %v", c.in, back, err)
		}
	}
	want := map[string]wire.Number{
		"fixint 20": 20, "uint8 200": 200, "uint64 20": 20, "int8 -3": -3, "int64 20": 20,
		"float64 20": 20, "float32 2.5": 2.5, "float64 0.5": 0.5, "nil": 0,
	}
	for name, b := range numberEncodings(t) {
		var n, viaReader wire.Number
		if _, err := n.UnmarshalMsg(b); err != nil || n != want[name] {
			t.Errorf("%s: got %v, %v; want %v", name, n, err, want[name])
		}
		if err := msgp.Decode(bytesReader(b), &viaReader); err != nil || viaReader != want[name] {
			t.Errorf("%s via Reader: %v, %v", name, viaReader, err)
		}
	}
}

// started_at is untyped in protocol "1": numbers and RFC 3339 strings
// (chrono's default) are read; nymph writes float epoch seconds.
func TestTimestampForms(t *testing.T) {
	const at = 1764410000 // 2025-11-29T09:53:20Z
	cases := map[string]struct {
		in   []byte
		want wire.Timestamp
	}{
		"float":            {msgp.AppendFloat64(nil, at+0.5), at + 0.5},
		"int":              {msgp.AppendInt64(nil, at), at},
		"uint":             {msgp.AppendUint64(nil, at), at},
		"nil":              {[]byte{0xc0}, 0},
		"RFC 3339 Z":       {msgp.AppendString(nil, "2025-11-29T09:53:20Z"), at},
		"RFC 3339 nanos":   {msgp.AppendString(nil, "2025-11-29T09:53:20.250000000Z"), at + 0.25},
		"RFC 3339 offset":  {msgp.AppendString(nil, "2025-11-29T10:53:20.5+01:00"), at + 0.5},
		"RFC 3339 +00:00":  {msgp.AppendString(nil, "2025-11-29T09:53:20+00:00"), at},
		"naive, read UTC":  {msgp.AppendString(nil, "2025-11-29T09:53:20.125"), at + 0.125},
		"naive, no digits": {msgp.AppendString(nil, "2025-11-29T09:53:20"), at},
	}
	for name, c := range cases {
		var ts, viaReader wire.Timestamp
		if _, err := ts.UnmarshalMsg(c.in); err != nil || ts != c.want {
			t.Errorf("%s: got %v, %v; want %v", name, ts, err, c.want)
		}
		if err := msgp.Decode(bytesReader(c.in), &viaReader); err != nil || viaReader != c.want {
			t.Errorf("%s via Reader: %v, %v", name, viaReader, err)
		}
	}
	for name, in := range map[string][]byte{
		"prose":    msgp.AppendString(nil, "yesterday"),
		"date":     msgp.AppendString(nil, "2025-11-29"),
		"bool":     {0xc3},
		"array":    {0x90},
		"bad zone": msgp.AppendString(nil, "2025-11-29T09:53:20 UTC"),
	} {
		var ts wire.Timestamp
		_, err := ts.UnmarshalMsg(in)
		if err == nil {
			t.Errorf("%s decoded as Timestamp %v", name, ts)
		} else if !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("%s: error %q does not say what is accepted", name, err)
		}
	}
	b, _ := wire.Timestamp(at).MarshalMsg(nil)
	if msgp.NextType(b) != msgp.Float64Type {
		t.Errorf("Timestamp encoded as %v, want float64", msgp.NextType(b))
	}
	if got := wire.TimestampOf(time.Unix(at, 5e8)); got != at+0.5 {
		t.Errorf("TimestampOf: %v", got)
	}
}

// TestLenientNumbersInMessages: int where a float is expected and a whole
// float where an int is expected, inside real messages.
func TestLenientNumbersInMessages(t *testing.T) {
	var p wire.PollRequest
	b := mapBody("worker_id", "w", "queue", "q", "timeout_s", 20, "cursor", nil, "invocations",
		[]any{map[string]any{"invocation_id": "i", "state": "running", "started_at": 1764410000, "exit_code": 3.0, "stdout_tail": ""}})
	if _, err := p.UnmarshalMsg(b); err != nil {
		t.Fatal(err)
	}
	if p.TimeoutS != 20 || p.Invocations[0].StartedAt != 1764410000 || p.Invocations[0].ExitCode == nil || *p.Invocations[0].ExitCode != 3 {
		t.Errorf("%+v", p)
	}
	var c wire.Capabilities
	if _, err := c.UnmarshalMsg(mapBody("runners", []string{"process"}, "max_invocations", 4.0, "workdir", "/w")); err != nil || c.MaxInvocations != 4 {
		t.Errorf("max_invocations 4.0: %v %v", c.MaxInvocations, err)
	}
	if _, err := new(wire.Capabilities).UnmarshalMsg(mapBody("max_invocations", 4.5)); err == nil {
		t.Error("max_invocations 4.5 accepted")
	}
}

func TestTextAcceptsNumbers(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want wire.Text
	}{
		"string":  {msgp.AppendString(nil, "2"), "2"},
		"int":     {msgp.AppendInt(nil, 2), "2"},
		"uint":    {msgp.AppendUint64(nil, math.MaxUint64), "18446744073709551615"},
		"neg":     {msgp.AppendInt(nil, -4), "-4"},
		"float":   {msgp.AppendFloat64(nil, 2.5), "2.5"},
		"float 1": {msgp.AppendFloat64(nil, 1e21), "1000000000000000000000"},
		"nil":     {[]byte{0xc0}, ""},
	}
	for name, c := range cases {
		var tx wire.Text
		if _, err := tx.UnmarshalMsg(c.in); err != nil || tx != c.want {
			t.Errorf("%s: %q, %v; want %q", name, tx, err, c.want)
		}
	}
	var s wire.SlurmConfig
	if _, err := s.UnmarshalMsg(mapBody("nodes", 2, "cpus-per-task", 8.0, "mem", "64G")); err != nil {
		t.Fatal(err)
	}
	if s.Nodes != "2" || s.CPUsPerTask != "8" || s.Mem != "64G" {
		t.Errorf("%+v", s)
	}
	if _, err := new(wire.Text).UnmarshalMsg([]byte{0x90}); err == nil {
		t.Error("array decoded as Text")
	}
}

func TestBlobForms(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		want wire.Blob
	}{
		"bin":          {msgp.AppendBytes(nil, []byte{1, 2, 255}), wire.Blob{1, 2, 255}},
		"str":          {msgp.AppendString(nil, "ab"), wire.Blob("ab")},
		"nil":          {[]byte{0xc0}, nil},
		"array":        {mapless([]any{1, 2, 255}), wire.Blob{1, 2, 255}},
		"array floats": {mapless([]any{1.0, 0.0}), wire.Blob{1, 0}},
		"empty array":  {[]byte{0x90}, nil},
	}
	for name, c := range cases {
		var bl wire.Blob
		if _, err := bl.UnmarshalMsg(c.in); err != nil || !cmp.Equal([]byte(bl), []byte(c.want), valueOpts) {
			t.Errorf("%s: %x, %v; want %x", name, []byte(bl), err, []byte(c.want))
		}
	}
	for name, in := range map[string][]byte{
		"256":        mapless([]any{1, 256}),
		"negative":   mapless([]any{-1}),
		"fraction":   mapless([]any{1.5}),
		"string":     mapless([]any{"a"}),
		"long count": {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"map":        {0x80},
	} {
		var bl wire.Blob
		if _, err := bl.UnmarshalMsg(in); err == nil {
			t.Errorf("%s decoded as Blob %x", name, []byte(bl))
		}
	}
	// An Ack from a peer that writes bytes as an array of ints.
	var a wire.Ack
	if _, err := a.UnmarshalMsg(mapBody("invocation_id", "i", "state", "succeeded", "result_blob", []any{0x93, 1, 2, 3}, "error", nil)); err != nil {
		t.Fatal(err)
	}
	if string(a.ResultBlob) != "\x93\x01\x02\x03" {
		t.Errorf("result_blob %x", []byte(a.ResultBlob))
	}
}

func TestBlobReusesCapacity(t *testing.T) {
	bl := make(wire.Blob, 0, 16)
	in := msgp.AppendBytes(nil, []byte("abc"))
	if _, err := bl.UnmarshalMsg(in); err != nil {
		t.Fatal(err)
	}
	in[2] = 'X' // the decoded blob must not alias the input
	if string(bl) != "abc" || cap(bl) != 16 {
		t.Errorf("blob %q cap %d", bl, cap(bl))
	}
}

func TestPayloadRefContentTypeSpellings(t *testing.T) {
	for _, key := range []string{"content_type", "contentType"} {
		var p wire.PayloadRef
		b := mapBody("bucket", "b", "key", "k", "size", 3.0, key, "text/plain")
		if _, err := p.UnmarshalMsg(b); err != nil {
			t.Fatal(err)
		}
		if want := (wire.PayloadRef{Bucket: "b", Key: "k", Size: 3, ContentType: "text/plain"}); !cmp.Equal(p, want) {
			t.Errorf("%s: %+v", key, p)
		}
		enc, _ := p.MarshalMsg(nil)
		generic, err := peerDecode(enc)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := generic.(map[string]any)["content_type"]; !ok {
			t.Errorf("encoded PayloadRef lacks content_type: %v", generic)
		}
	}
	var p wire.PayloadRef
	if _, err := p.UnmarshalMsg(mapBody("bucket", "b", "contentType", nil, "sha256", nil)); err != nil || p.SHA256 != nil {
		t.Errorf("nils: %+v %v", p, err)
	}
}

func mapless(v any) []byte {
	b, err := msgp.AppendIntf(nil, v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestTextFromJSON(t *testing.T) {
	for in, want := range map[string]wire.Text{`"4"`: "4", `4`: "4", `2.5`: "2.5", `"gpu:2"`: "gpu:2"} {
		var got wire.Text
		if err := got.UnmarshalJSON([]byte(in)); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`true`, `{}`, `[1]`} {
		var got wire.Text
		if err := got.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s: accepted as %q", in, got)
		}
	}
}

// A rotation refused with key_id nil is read, so the daemon reports the
// refusal's reason rather than a decode error.
func TestKeyRotationRefusalWithNilKeyID(t *testing.T) {
	b := msgp.AppendMapHeader(nil, 2)
	b = msgp.AppendNil(msgp.AppendString(b, "key_id"))
	b = msgp.AppendMapHeader(msgp.AppendString(b, "reject"), 2)
	b = msgp.AppendString(msgp.AppendString(b, "code"), "key_id_mismatch")
	b = msgp.AppendString(msgp.AppendString(b, "message"), "not yours")
	var r wire.KeyRotationResponse
	if _, err := r.UnmarshalMsg(b); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if r.KeyID != "" || r.Reject == nil || r.Reject.Code != "key_id_mismatch" {
		t.Fatalf("decoded %+v", r)
	}
	// What the plane sends is still a string.
	out, _ := (&wire.KeyRotationResponse{KeyID: "ed25519-ab"}).MarshalMsg(nil)
	if !bytes.Contains(out, msgp.AppendString(nil, "ed25519-ab")) {
		t.Fatalf("key_id not sent as a string: %x", out)
	}
}

// A plane that sends commands or config as nil (for none) is read as
// sending none; what nymph sends for none is still [] and {} (the plane
// never leaves them nil: TestEmptyRepliesSendEmptyCollections).
func TestNilCommandsAndConfigAreRead(t *testing.T) {
	b := msgp.AppendMapHeader(nil, 2)
	b = msgp.AppendNil(msgp.AppendString(b, "commands"))
	b = msgp.AppendNil(msgp.AppendString(b, "target_nymph_version"))
	var p wire.PollResponse
	if _, err := p.UnmarshalMsg(b); err != nil || len(p.Commands) != 0 {
		t.Fatalf("poll reply with commands nil: %v %+v", err, p)
	}
	b = msgp.AppendMapHeader(nil, 2)
	b = msgp.AppendString(msgp.AppendString(b, "worker_id"), "w1")
	b = msgp.AppendNil(msgp.AppendString(b, "config"))
	var h wire.HelloResponse
	if _, err := h.UnmarshalMsg(b); err != nil || *h.WorkerID != "w1" {
		t.Fatalf("hello reply with config nil: %v %+v", err, h)
	}
	out, _ := (&wire.PollResponse{Commands: []wire.Command{}}).MarshalMsg(nil)
	if !bytes.Contains(out, append(msgp.AppendString(nil, "commands"), 0x90)) {
		t.Fatalf("empty commands not sent as []: %x", out)
	}
}
