package wire_test

import (
	"bytes"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nymphd/nymph/gen/goldens/vectors"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"
)

// valueOpts compares decoded messages: nil and empty slices or maps are the
// same message, and raw msgpack values are compared by what they decode to.
var valueOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmpopts.EquateNaNs(),
	// A protocol float may be NaN; EquateNaNs does not see named types.
	cmp.Comparer(func(a, b wire.Float) bool { return a == b || (a != a && b != b) }),
	cmp.Comparer(func(a, b wire.Number) bool { return a == b || (a != a && b != b) }),
	cmp.Comparer(func(a, b wire.Timestamp) bool { return a == b || (a != a && b != b) }),
	cmp.FilterValues(func(a, b msgp.Raw) bool { return len(a) > 0 || len(b) > 0 },
		cmp.Comparer(func(a, b msgp.Raw) bool {
			if bytes.Equal(a, b) {
				return true
			}
			va, errA := peerDecode(a)
			vb, errB := peerDecode(b)
			return errA == nil && errB == nil && cmp.Equal(va, vb, cmpopts.EquateEmpty())
		})),
}

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("golden file missing (run `make gen`): %v", err)
	}
	return b
}

// peerDecode decodes msgpack with the independent implementation into the
// canonical generic form of vectors.Plain.
func peerDecode(b []byte) (any, error) {
	if len(b) == 0 { // an empty msgp.Raw stands for nil
		return nil, nil
	}
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	v, err := dec.DecodeInterface()
	if err != nil {
		return nil, err
	}
	if _, err := dec.DecodeInterface(); err == nil {
		return nil, errTrailing
	}
	return canonical(v), nil
}

type trailingError struct{}

func (trailingError) Error() string { return "trailing bytes after the value" }

var errTrailing = trailingError{}

// canonical folds the peer's many integer widths into int64 (uint64 above
// MaxInt64) so that a comparison is about values and msgpack families.
func canonical(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonical(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = canonical(e)
		}
		return x
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
	}
	return v
}

// TestGoldenBytes: our encoder produces exactly the checked-in bytes.
func TestGoldenBytes(t *testing.T) {
	for _, v := range vectors.All() {
		t.Run(v.Name, func(t *testing.T) {
			want := readGolden(t, v.Name+".msgpack")
			got, err := v.Value.MarshalMsg(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encoding differs from testdata/%s.msgpack (run `make gen` if the change is intended)\n got: %s\nwant: %s",
					v.Name, hex.EncodeToString(got), hex.EncodeToString(want))
			}
			// Appending into a buffer that already holds bytes must not
			// disturb them: callers reuse buffers.
			prefix := []byte{0xde, 0xad}
			app, _ := v.Value.MarshalMsg(append([]byte(nil), prefix...))
			if !bytes.Equal(app, append(prefix, want...)) {
				t.Errorf("MarshalMsg does not append")
			}
		})
	}
}

// TestGoldenFilesAreVectors: no golden file lingers without its vector.
func TestGoldenFilesAreVectors(t *testing.T) {
	var have []string
	for _, pat := range []string{"*.msgpack", "*.json"} {
		m, err := filepath.Glob(filepath.Join("testdata", pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			have = append(have, filepath.Base(p))
		}
	}
	sort.Strings(have)
	if diff := cmp.Diff(vectors.Names(), have); diff != "" {
		t.Errorf("testdata does not match the vectors (-vectors +files); run `make gen`:\n%s", diff)
	}
}

// TestGoldenPeerDecode is the compatibility proof: an independent msgpack
// implementation reads the golden bytes as exactly the field map written
// from the protocol text.
func TestGoldenPeerDecode(t *testing.T) {
	for _, v := range vectors.All() {
		t.Run(v.Name, func(t *testing.T) {
			want, err := vectors.ParseFieldsJSON(readGolden(t, v.Name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(vectors.Plain(v.Fields), want); diff != "" {
				t.Fatalf("testdata/%s.json is stale (-vector +file); run `make gen`:\n%s", v.Name, diff)
			}
			got, err := peerDecode(readGolden(t, v.Name+".msgpack"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("peer decoder reads a different field map (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGoldenDecode: our decoder reads the golden bytes, and the same field
// map as the peer encodes it (other key order, other integer widths), back
// into the populated value.
func TestGoldenDecode(t *testing.T) {
	for _, v := range vectors.All() {
		t.Run(v.Name, func(t *testing.T) {
			got := v.New()
			rest, err := got.UnmarshalMsg(readGolden(t, v.Name+".msgpack"))
			if err != nil || len(rest) != 0 {
				t.Fatalf("decode: %v (%d bytes left)", err, len(rest))
			}
			if diff := cmp.Diff(v.Value, got, valueOpts); diff != "" {
				t.Errorf("decoded golden differs (-want +got):\n%s", diff)
			}

			peer, err := msgpack.Marshal(vectors.Plain(v.Fields))
			if err != nil {
				t.Fatal(err)
			}
			got = v.New()
			if _, err := got.UnmarshalMsg(peer); err != nil {
				t.Fatalf("decode the peer's encoding %x: %v", peer, err)
			}
			if diff := cmp.Diff(v.Value, got, valueOpts); diff != "" {
				t.Errorf("decoded peer encoding differs (-want +got):\n%s", diff)
			}
		})
	}
}

// extraValues are unknown-key values of every msgpack family and width.
type extraValue struct {
	name string
	raw  []byte
}

var extraValues = []extraValue{
	{"nil", []byte{0xc0}},
	{"false", []byte{0xc2}},
	{"true", []byte{0xc3}},
	{"posfixint", []byte{0x7f}},
	{"negfixint", []byte{0xe0}},
	{"uint8", []byte{0xcc, 0xff}},
	{"uint16", []byte{0xcd, 0xff, 0xff}},
	{"uint32", []byte{0xce, 0xff, 0xff, 0xff, 0xff}},
	{"uint64", []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
	{"int8", []byte{0xd0, 0x80}},
	{"int16", []byte{0xd1, 0x80, 0x00}},
	{"int32", []byte{0xd2, 0x80, 0, 0, 0}},
	{"int64", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}},
	{"float32", []byte{0xca, 0x3f, 0xc0, 0, 0}},
	{"float64", []byte{0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}},
	{"fixstr", append([]byte{0xa5}, "hello"...)},
	{"str8", append([]byte{0xd9, 3}, "abc"...)},
	{"str16", append([]byte{0xda, 0, 3}, "abc"...)},
	{"str32", append([]byte{0xdb, 0, 0, 0, 3}, "abc"...)},
	{"bin8", []byte{0xc4, 2, 1, 2}},
	{"bin16", []byte{0xc5, 0, 2, 1, 2}},
	{"bin32", []byte{0xc6, 0, 0, 0, 2, 1, 2}},
	{"fixarray", []byte{0x93, 0x01, 0xa1, 'x', 0x91, 0xc0}},
	{"array16", []byte{0xdc, 0, 2, 0xc0, 0xc3}},
	{"array32", []byte{0xdd, 0, 0, 0, 1, 0x80}},
	{"fixmap", []byte{0x82, 0xa1, 'a', 0x81, 0xa1, 'b', 0x90, 0xa1, 'c', 0xc0}},
	{"map16", []byte{0xde, 0, 1, 0xa1, 'k', 0x01}},
	{"map32", []byte{0xdf, 0, 0, 0, 1, 0x01, 0x02}}, // integer key: still skippable
	{"fixext1", []byte{0xd4, 0x05, 0x01}},
	{"fixext2", []byte{0xd5, 0x05, 0x01, 0x02}},
	{"fixext4", []byte{0xd6, 0xff, 0, 0, 0, 1}}, // timestamp 32
	{"fixext8", []byte{0xd7, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}},
	{"fixext16", append([]byte{0xd8, 0x05}, make([]byte, 16)...)},
	{"ext8", []byte{0xc7, 3, 0xff, 1, 2, 3}},
	{"ext16", []byte{0xc8, 0, 1, 0x07, 9}},
	{"ext32", []byte{0xc9, 0, 0, 0, 1, 0x07, 9}},
}

// injectUnknown copies one msgpack value, adding every extra key to each
// map that shape marks as a struct (vectors.M), half before and half after
// the known keys.
func injectUnknown(t testing.TB, b []byte, shape any) (out, rest []byte) {
	return injectExtras(t, b, shape, extraValues)
}

// streamExtras are the extra values the streaming decoders are checked
// with: msgp v1.6.5's Reader.Skip fails on an ext32 that does not start the
// stream ("too few bytes left"), which the byte-slice decoders do not share.
var streamExtras = func() []extraValue {
	var out []extraValue
	for _, e := range extraValues {
		if e.name != "ext32" {
			out = append(out, e)
		}
	}
	return out
}()

func injectExtras(t testing.TB, b []byte, shape any, extras []extraValue) (out, rest []byte) {
	t.Helper()
	switch s := shape.(type) {
	case vectors.M:
		if msgp.NextType(b) != msgp.MapType {
			break
		}
		n, rest := mustRead(t, msgp.ReadMapHeaderBytes, b)
		out = msgp.AppendMapHeader(nil, n+uint32(len(extras)))
		half := len(extras) / 2
		for _, e := range extras[:half] {
			out = append(msgp.AppendString(out, "zz_unknown_"+e.name), e.raw...)
		}
		for ; n > 0; n-- {
			var key []byte
			key, rest = mustRead(t, msgp.ReadMapKeyZC, rest)
			out = msgp.AppendString(out, string(key))
			var val []byte
			val, rest = injectExtras(t, rest, s[string(key)], extras)
			out = append(out, val...)
		}
		for _, e := range extras[half:] {
			out = append(msgp.AppendString(out, "zz_unknown_"+e.name), e.raw...)
		}
		return out, rest
	case []any:
		if msgp.NextType(b) != msgp.ArrayType {
			break
		}
		n, rest := mustRead(t, msgp.ReadArrayHeaderBytes, b)
		out = msgp.AppendArrayHeader(nil, n)
		for i := 0; i < int(n); i++ {
			var val []byte
			var elem any
			if i < len(s) {
				elem = s[i]
			}
			val, rest = injectExtras(t, rest, elem, extras)
			out = append(out, val...)
		}
		return out, rest
	}
	return copyValue(t, b)
}

// TestDecodeSkipsUnknownKeys: extra keys of every msgpack type, at every
// struct level, change nothing.
func TestDecodeSkipsUnknownKeys(t *testing.T) {
	for _, v := range vectors.All() {
		t.Run(v.Name, func(t *testing.T) {
			aug, rest := injectUnknown(t, readGolden(t, v.Name+".msgpack"), v.Fields)
			if len(rest) != 0 {
				t.Fatalf("%d bytes left", len(rest))
			}
			got := v.New()
			left, err := got.UnmarshalMsg(aug)
			if err != nil || len(left) != 0 {
				t.Fatalf("decode with unknown keys: %v (%d bytes left)", err, len(left))
			}
			if diff := cmp.Diff(v.Value, got, valueOpts); diff != "" {
				t.Errorf("unknown keys changed the value (-want +got):\n%s", diff)
			}
			streamIn, _ := injectExtras(t, readGolden(t, v.Name+".msgpack"), v.Fields, streamExtras)
			streamed := v.New()
			if err := msgp.Decode(bytes.NewReader(streamIn), streamed.(msgp.Decodable)); err != nil {
				t.Fatalf("DecodeMsg with unknown keys: %v", err)
			}
			if diff := cmp.Diff(v.Value, streamed, valueOpts); diff != "" {
				t.Errorf("unknown keys changed the DecodeMsg value (-want +got):\n%s", diff)
			}
		})
	}
}

// setNil copies one msgpack value with the value at path replaced by nil;
// a missing last key is added. "[]" stands for every array element.
func setNil(t *testing.T, b []byte, path []string) (out, rest []byte) {
	t.Helper()
	if len(path) == 0 {
		rest, err := msgp.Skip(b)
		if err != nil {
			t.Fatal(err)
		}
		return []byte{0xc0}, rest
	}
	switch {
	case path[0] == "[]" && msgp.NextType(b) == msgp.ArrayType:
		n, rest := mustRead(t, msgp.ReadArrayHeaderBytes, b)
		out = msgp.AppendArrayHeader(nil, n)
		for ; n > 0; n-- {
			var val []byte
			val, rest = setNil(t, rest, path[1:])
			out = append(out, val...)
		}
		return out, rest
	case path[0] != "[]" && msgp.NextType(b) == msgp.MapType:
		n, rest := mustRead(t, msgp.ReadMapHeaderBytes, b)
		var body []byte
		found := false
		for ; n > 0; n-- {
			var key []byte
			key, rest = mustRead(t, msgp.ReadMapKeyZC, rest)
			body = msgp.AppendString(body, string(key))
			var val []byte
			if string(key) == path[0] {
				found = true
				val, rest = setNil(t, rest, path[1:])
			} else {
				val, rest = copyValue(t, rest)
			}
			body = append(body, val...)
		}
		count := uint32(0)
		for r := body; len(r) > 0; count++ {
			r, _ = msgp.Skip(r)
			r, _ = msgp.Skip(r)
		}
		if !found && len(path) == 1 {
			body = append(msgp.AppendString(body, path[0]), 0xc0)
			count++
		}
		return append(msgp.AppendMapHeader(nil, count), body...), rest
	}
	return copyValue(t, b)
}

// lookup follows a dotted path through a generic decoded value; "[]" takes
// every element. It returns every value found.
func lookup(v any, path []string) []any {
	if len(path) == 0 {
		return []any{v}
	}
	switch x := v.(type) {
	case map[string]any:
		e, ok := x[path[0]]
		if !ok {
			return nil
		}
		return lookup(e, path[1:])
	case []any:
		if path[0] != "[]" {
			return nil
		}
		var all []any
		for _, e := range x {
			all = append(all, lookup(e, path[1:])...)
		}
		return all
	}
	return nil
}

// TestDecodeAcceptsNil: every field the protocol marks `| null` or optional
// decodes from msgpack nil, and comes out as null, absent or empty.
func TestDecodeAcceptsNil(t *testing.T) {
	for _, v := range vectors.All() {
		for _, p := range v.Nullable {
			t.Run(v.Name+"/"+p, func(t *testing.T) {
				path := strings.Split(p, ".")
				in, _ := setNil(t, readGolden(t, v.Name+".msgpack"), path)
				got := v.New()
				if _, err := got.UnmarshalMsg(in); err != nil {
					t.Fatalf("nil %s: %v", p, err)
				}
				if err := msgp.Decode(bytes.NewReader(in), v.New().(msgp.Decodable)); err != nil {
					t.Errorf("DecodeMsg with nil %s: %v", p, err)
				}
				enc, err := got.MarshalMsg(nil)
				if err != nil {
					t.Fatal(err)
				}
				generic, err := peerDecode(enc)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range lookup(generic, path) {
					switch x := e.(type) {
					case nil:
					case []byte:
						if len(x) != 0 {
							t.Errorf("%s: nil decoded to %x", p, x)
						}
					case string:
						if x != "" {
							t.Errorf("%s: nil decoded to %q", p, x)
						}
					default:
						t.Errorf("%s: nil decoded to %#v", p, e)
					}
				}
			})
		}
	}
}

// copyValue copies the next msgpack value of b.
func copyValue(t testing.TB, b []byte) (out, rest []byte) {
	t.Helper()
	rest, err := msgp.Skip(b)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), b[:len(b)-len(rest)]...), rest
}

// mustRead reads one header or key of b with read; the goldens are
// well-formed, so a read that fails fails the test.
func mustRead[V any](t testing.TB, read func([]byte) (V, []byte, error), b []byte) (V, []byte) {
	t.Helper()
	v, rest, err := read(b)
	if err != nil {
		t.Fatal(err)
	}
	return v, rest
}

func bytesReader(b []byte) *msgp.Reader { return msgp.NewReader(bytes.NewReader(b)) }

// TestStreamingCodecsAgree: the io-based EncodeMsg/DecodeMsg that msgp also
// generates write and read the same bytes as MarshalMsg/UnmarshalMsg.
func TestStreamingCodecsAgree(t *testing.T) {
	for _, v := range vectors.All() {
		t.Run(v.Name, func(t *testing.T) {
			want := readGolden(t, v.Name+".msgpack")
			var buf bytes.Buffer
			w := msgp.NewWriter(&buf)
			if err := v.Value.(msgp.Encodable).EncodeMsg(w); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("EncodeMsg wrote %x\nwant %x", buf.Bytes(), want)
			}
			got := v.New()
			if err := msgp.Decode(bytes.NewReader(want), got.(msgp.Decodable)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(v.Value, got, valueOpts); diff != "" {
				t.Errorf("DecodeMsg (-want +got):\n%s", diff)
			}
		})
	}
}
