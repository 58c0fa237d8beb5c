package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tinylib/msgp/msgp"
)

// Peers written in Python or Rust may send 20 or 20.0 for the same field,
// and msgp's generated readers are strict about int versus float. Every
// numeric field of the protocol therefore uses Float, Number, Int or
// Timestamp, whose decoders accept any msgpack int, uint or float (and nil
// as zero). They differ in what they write: see each type.

// Float is a protocol number encoded as a msgpack float64: the poll
// request's timeout_s, which a daemon of protocol "1" writes as 20.0.
type Float float64

// Number is a protocol number a control plane sends: encoded as a msgpack
// integer (smallest form) when its value is whole, as float64 otherwise.
// A peer in Rust that typed the field u64 reads a whole value, and one that
// typed it f64 reads either form, so an integer is the form every careful
// reader accepts; a fraction is kept where it means something (a 2.5 s
// timeout). Decoding accepts any number, as Float does.
type Number float64

// Timestamp is a point in time as epoch seconds, encoded as a msgpack
// float64 (InvocationStatus.started_at). Decoding also accepts any integer
// and an RFC 3339 string, which is how Rust's chrono serializes a DateTime
// by default; a string without a zone offset is read as UTC.
type Timestamp float64

// Int is a protocol integer encoded as a msgpack int; a float with no
// fractional part is accepted on decode.
type Int int64

// Text is a string field that also accepts a number on decode (a peer may
// send `nodes: 2` or `nodes: "2"`); it is always encoded as a string.
type Text string

// Blob is opaque bytes encoded as msgpack bin. Decoding also accepts str,
// nil, and an array of small ints (how some serializers write bytes).
type Blob []byte

// SharedBlob is a Blob that, decoded from msgpack bin or str, shares the
// bytes it was decoded from instead of copying them. It carries an ack's
// result, which may be 16 MiB: a control plane reads the body, decodes
// it and hands the ack to its core, which copies what it keeps, so a copy
// at decode would only double the memory each large ack costs. The
// decoded value is valid while the input is: a caller that reuses its
// input buffer must copy first.
type SharedBlob []byte

// MarshalMsg implements msgp.Marshaler.
func (f Float) MarshalMsg(b []byte) ([]byte, error) { return msgp.AppendFloat64(b, float64(f)), nil }

// Msgsize implements msgp.Sizer.
func (f Float) Msgsize() int { return msgp.Float64Size }

// EncodeMsg implements msgp.Encodable.
func (f Float) EncodeMsg(w *msgp.Writer) error { return w.WriteFloat64(float64(f)) }

// UnmarshalMsg implements msgp.Unmarshaler.
func (f *Float) UnmarshalMsg(b []byte) ([]byte, error) { return unmarshalFloat(f, b) }

// DecodeMsg implements msgp.Decodable.
func (f *Float) DecodeMsg(r *msgp.Reader) error { return decodeFloat(f, r) }

// unmarshalFloat reads any msgpack number, or nil as zero, from b into f:
// Float and Number decode alike and differ only in what they write.
func unmarshalFloat[F ~float64](f *F, b []byte) ([]byte, error) {
	v, rest, err := readNumberBytes(b)
	if err != nil {
		return b, err
	}
	*f = F(v.float())
	return rest, nil
}

// decodeFloat is unmarshalFloat for a stream.
func decodeFloat[F ~float64](f *F, r *msgp.Reader) error {
	v, err := readNumber(r)
	if err != nil {
		return err
	}
	*f = F(v.float())
	return nil
}

// isWholeInt64 reports whether f has no fractional part and fits an int64.
func isWholeInt64(f float64) bool {
	// 2^63 itself is out of range; math.MaxInt64 as a float64 rounds up to it.
	return f == math.Trunc(f) && f >= -1<<63 && f < 1<<63
}

// MarshalMsg implements msgp.Marshaler.
func (n Number) MarshalMsg(b []byte) ([]byte, error) {
	if f := float64(n); isWholeInt64(f) {
		return msgp.AppendInt64(b, int64(f)), nil
	}
	return msgp.AppendFloat64(b, float64(n)), nil
}

// Msgsize implements msgp.Sizer.
func (n Number) Msgsize() int { return max(msgp.Int64Size, msgp.Float64Size) }

// EncodeMsg implements msgp.Encodable.
func (n Number) EncodeMsg(w *msgp.Writer) error {
	if f := float64(n); isWholeInt64(f) {
		return w.WriteInt64(int64(f))
	}
	return w.WriteFloat64(float64(n))
}

// UnmarshalMsg implements msgp.Unmarshaler.
func (n *Number) UnmarshalMsg(b []byte) ([]byte, error) { return unmarshalFloat(n, b) }

// DecodeMsg implements msgp.Decodable.
func (n *Number) DecodeMsg(r *msgp.Reader) error { return decodeFloat(n, r) }

// TimestampOf returns t as a Timestamp, to the nanosecond; whole seconds
// and the fraction are converted apart so that round values stay round.
func TimestampOf(t time.Time) Timestamp {
	return Timestamp(float64(t.Unix()) + float64(t.Nanosecond())/1e9)
}

// MarshalMsg implements msgp.Marshaler.
func (ts Timestamp) MarshalMsg(b []byte) ([]byte, error) {
	return msgp.AppendFloat64(b, float64(ts)), nil
}

// Msgsize implements msgp.Sizer.
func (ts Timestamp) Msgsize() int { return msgp.Float64Size }

// EncodeMsg implements msgp.Encodable.
func (ts Timestamp) EncodeMsg(w *msgp.Writer) error { return w.WriteFloat64(float64(ts)) }

// UnmarshalMsg implements msgp.Unmarshaler.
func (ts *Timestamp) UnmarshalMsg(b []byte) ([]byte, error) {
	if msgp.NextType(b) == msgp.StrType {
		s, rest, err := msgp.ReadStringZC(b)
		if err != nil {
			return b, err
		}
		v, err := parseTimestamp(s)
		if err != nil {
			return b, err
		}
		*ts = v
		return rest, nil
	}
	v, rest, err := readNumberBytes(b)
	if err != nil {
		return b, fmt.Errorf("wire: want epoch seconds or an RFC 3339 time: %w", err)
	}
	*ts = Timestamp(v.float())
	return rest, nil
}

// DecodeMsg implements msgp.Decodable.
func (ts *Timestamp) DecodeMsg(r *msgp.Reader) error { return decodeByUnmarshal(r, ts) }

// naiveRFC3339 is an RFC 3339 date-time without its zone offset, as chrono
// writes a NaiveDateTime; fractional seconds of any length are accepted.
const naiveRFC3339 = "2006-01-02T15:04:05"

// maxQuoted bounds how much of a bad input an error message repeats.
const maxQuoted = 64

func parseTimestamp(s []byte) (Timestamp, error) {
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil {
		var naiveErr error
		if t, naiveErr = time.Parse(naiveRFC3339, string(s)); naiveErr != nil {
			if len(s) > maxQuoted {
				s = s[:maxQuoted]
			}
			return 0, fmt.Errorf("wire: time %q is neither epoch seconds nor an RFC 3339 date-time", s)
		}
	}
	return TimestampOf(t), nil
}

// MarshalMsg implements msgp.Marshaler.
func (i Int) MarshalMsg(b []byte) ([]byte, error) { return msgp.AppendInt64(b, int64(i)), nil }

// Msgsize implements msgp.Sizer.
func (i Int) Msgsize() int { return msgp.Int64Size }

// EncodeMsg implements msgp.Encodable.
func (i Int) EncodeMsg(w *msgp.Writer) error { return w.WriteInt64(int64(i)) }

// UnmarshalMsg implements msgp.Unmarshaler.
func (i *Int) UnmarshalMsg(b []byte) ([]byte, error) {
	v, rest, err := readNumberBytes(b)
	if err != nil {
		return b, err
	}
	n, err := v.int()
	if err != nil {
		return b, err
	}
	*i = Int(n)
	return rest, nil
}

// DecodeMsg implements msgp.Decodable.
func (i *Int) DecodeMsg(r *msgp.Reader) error {
	v, err := readNumber(r)
	if err != nil {
		return err
	}
	n, err := v.int()
	if err != nil {
		return err
	}
	*i = Int(n)
	return nil
}

// IsZero reports whether t is empty; fields tagged omitzero are then left out.
func (t Text) IsZero() bool { return t == "" }

// UnmarshalJSON accepts a string or a number, as the msgpack form does:
// `"nodes": 2` and `"nodes": "2"` are the same request.
func (t *Text) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = Text(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("wire: want string or number, got %s", b)
	}
	*t = Text(n.String())
	return nil
}

// MarshalMsg implements msgp.Marshaler.
func (t Text) MarshalMsg(b []byte) ([]byte, error) { return msgp.AppendString(b, string(t)), nil }

// Msgsize implements msgp.Sizer.
func (t Text) Msgsize() int { return msgp.StringPrefixSize + len(t) }

// EncodeMsg implements msgp.Encodable.
func (t Text) EncodeMsg(w *msgp.Writer) error { return w.WriteString(string(t)) }

// UnmarshalMsg implements msgp.Unmarshaler.
func (t *Text) UnmarshalMsg(b []byte) ([]byte, error) {
	switch msgp.NextType(b) {
	case msgp.StrType:
		s, rest, err := msgp.ReadStringBytes(b)
		*t = Text(s)
		return rest, err
	case msgp.NilType:
		*t = ""
		return msgp.ReadNilBytes(b)
	}
	v, rest, err := readNumberBytes(b)
	if err != nil {
		return b, fmt.Errorf("wire: want string or number: %w", err)
	}
	*t = Text(v.text())
	return rest, nil
}

// DecodeMsg implements msgp.Decodable.
func (t *Text) DecodeMsg(r *msgp.Reader) error {
	typ, err := r.NextType()
	if err != nil {
		return err
	}
	switch typ {
	case msgp.StrType:
		s, err := r.ReadString()
		*t = Text(s)
		return err
	case msgp.NilType:
		*t = ""
		return r.ReadNil()
	}
	v, err := readNumber(r)
	if err != nil {
		return fmt.Errorf("wire: want string or number: %w", err)
	}
	*t = Text(v.text())
	return nil
}

// IsZero reports whether bl is empty; fields tagged omitzero are then left
// out (msgp's omitempty does not see through a type with its own codec).
func (bl Blob) IsZero() bool { return len(bl) == 0 }

// MarshalMsg implements msgp.Marshaler.
func (bl Blob) MarshalMsg(b []byte) ([]byte, error) { return msgp.AppendBytes(b, bl), nil }

// Msgsize implements msgp.Sizer.
func (bl Blob) Msgsize() int { return msgp.BytesPrefixSize + len(bl) }

// EncodeMsg implements msgp.Encodable.
func (bl Blob) EncodeMsg(w *msgp.Writer) error { return w.WriteBytes(bl) }

// UnmarshalMsg implements msgp.Unmarshaler. It reuses the Blob's capacity.
func (bl *Blob) UnmarshalMsg(b []byte) ([]byte, error) {
	return unmarshalBlobInto((*[]byte)(bl), b, (*bl)[:0], false)
}

// unmarshalBlob decodes a Blob or SharedBlob from b. Bytes from bin or
// str are appended to dst, or, when share is set, returned as the very
// bytes of b.
func unmarshalBlob(b, dst []byte, share bool) ([]byte, []byte, error) {
	switch msgp.NextType(b) {
	case msgp.BinType, msgp.StrType:
		read := msgp.ReadBytesZC
		if msgp.NextType(b) == msgp.StrType {
			read = msgp.ReadStringZC
		}
		v, rest, err := read(b)
		if err != nil {
			return nil, b, err
		}
		if share {
			return v, rest, nil
		}
		return append(dst, v...), rest, nil
	case msgp.NilType:
		rest, err := msgp.ReadNilBytes(b)
		return dst, rest, err
	case msgp.ArrayType:
		n, rest, err := msgp.ReadArrayHeaderBytes(b)
		if err != nil {
			return nil, b, err
		}
		if uint64(n) > uint64(len(rest)) { // each element takes at least one byte
			return nil, b, msgp.ErrShortBytes
		}
		for k := uint32(0); k < n; k++ {
			var v numberValue
			v, rest, err = readNumberBytes(rest)
			if err != nil {
				return nil, b, err
			}
			c, err := v.int()
			if err != nil || c < 0 || c > 255 {
				return nil, b, fmt.Errorf("wire: blob array element %d is not a byte", k)
			}
			dst = append(dst, byte(c))
		}
		return dst, rest, nil
	}
	return nil, b, msgp.TypeError{Method: msgp.BinType, Encoded: msgp.NextType(b)}
}

// DecodeMsg implements msgp.Decodable.
func (bl *Blob) DecodeMsg(r *msgp.Reader) error { return decodeByUnmarshal(r, bl) }

// IsZero reports whether bl is empty (see Blob.IsZero).
func (bl SharedBlob) IsZero() bool { return len(bl) == 0 }

// MarshalMsg implements msgp.Marshaler.
func (bl SharedBlob) MarshalMsg(b []byte) ([]byte, error) { return msgp.AppendBytes(b, bl), nil }

// Msgsize implements msgp.Sizer.
func (bl SharedBlob) Msgsize() int { return msgp.BytesPrefixSize + len(bl) }

// EncodeMsg implements msgp.Encodable.
func (bl SharedBlob) EncodeMsg(w *msgp.Writer) error { return w.WriteBytes(bl) }

// UnmarshalMsg implements msgp.Unmarshaler. The result shares b's bytes,
// unless it was written as an array of ints.
func (bl *SharedBlob) UnmarshalMsg(b []byte) ([]byte, error) {
	return unmarshalBlobInto((*[]byte)(bl), b, nil, true)
}

// DecodeMsg implements msgp.Decodable. A stream has no bytes to share:
// the raw value read from it is the Blob's own.
func (bl *SharedBlob) DecodeMsg(r *msgp.Reader) error { return decodeByUnmarshal(r, bl) }

// unmarshalBlobInto decodes a Blob or SharedBlob from b (see unmarshalBlob)
// and stores it in *bl; on an error *bl is left as it was.
func unmarshalBlobInto(bl *[]byte, b, dst []byte, share bool) ([]byte, error) {
	v, rest, err := unmarshalBlob(b, dst, share)
	if err == nil {
		*bl = v
	}
	return rest, err
}

// decodeByUnmarshal reads one value from r and decodes it with dst's own
// UnmarshalMsg, so that a stream is read by the same rules as bytes are
// (Timestamp, Blob, SharedBlob).
func decodeByUnmarshal(r *msgp.Reader, dst msgp.Unmarshaler) error {
	var raw msgp.Raw
	if err := raw.DecodeMsg(r); err != nil {
		return err
	}
	if len(raw) == 0 { // msgp.Raw reads nil as no bytes at all
		raw = msgp.AppendNil(raw)
	}
	_, err := dst.UnmarshalMsg(raw)
	return err
}

// numberValue is one decoded msgpack number, keeping its kind so that an
// integer never round-trips through float64.
type numberValue struct {
	kind msgp.Type
	i    int64
	u    uint64
	f    float64
}

func (v numberValue) float() float64 {
	switch v.kind {
	case msgp.IntType:
		return float64(v.i)
	case msgp.UintType:
		return float64(v.u)
	}
	return v.f
}

func (v numberValue) int() (int64, error) {
	switch v.kind {
	case msgp.IntType:
		return v.i, nil
	case msgp.UintType:
		if v.u > math.MaxInt64 {
			return 0, fmt.Errorf("wire: integer %d overflows int64", v.u)
		}
		return int64(v.u), nil
	}
	if !isWholeInt64(v.f) {
		return 0, fmt.Errorf("wire: number %v is not an integer", v.f)
	}
	return int64(v.f), nil
}

func (v numberValue) text() string {
	switch v.kind {
	case msgp.IntType:
		return strconv.FormatInt(v.i, 10)
	case msgp.UintType:
		return strconv.FormatUint(v.u, 10)
	}
	return strconv.FormatFloat(v.f, 'f', -1, 64)
}

func readNumberBytes(b []byte) (numberValue, []byte, error) {
	var v numberValue
	var err error
	rest := b
	switch t := msgp.NextType(b); t {
	case msgp.IntType:
		v.kind = t
		v.i, rest, err = msgp.ReadInt64Bytes(b)
	case msgp.UintType:
		v.kind = t
		v.u, rest, err = msgp.ReadUint64Bytes(b)
	case msgp.Float64Type, msgp.Float32Type:
		v.kind = msgp.Float64Type
		v.f, rest, err = msgp.ReadFloat64Bytes(b)
	case msgp.NilType:
		v.kind = msgp.IntType
		rest, err = msgp.ReadNilBytes(b)
	default:
		err = msgp.TypeError{Method: msgp.Float64Type, Encoded: t}
	}
	return v, rest, err
}

func readNumber(r *msgp.Reader) (numberValue, error) {
	var v numberValue
	t, err := r.NextType()
	if err != nil {
		return v, err
	}
	switch t {
	case msgp.IntType:
		v.kind = t
		v.i, err = r.ReadInt64()
	case msgp.UintType:
		v.kind = t
		v.u, err = r.ReadUint64()
	case msgp.Float64Type, msgp.Float32Type:
		v.kind = msgp.Float64Type
		v.f, err = r.ReadFloat64()
	case msgp.NilType:
		v.kind = msgp.IntType
		err = r.ReadNil()
	default:
		err = msgp.TypeError{Method: msgp.Float64Type, Encoded: t}
	}
	return v, err
}
