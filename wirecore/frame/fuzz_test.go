package frame

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nymphd/nymph/wirecore/wire"
)

// seedRequests are real envelopes as our daemon encodes them.
func seedRequests(t testing.TB) [][]byte {
	reqs := []*wire.RelayRequest{
		{Endpoint: "/v1/daemon/poll", ID: "01JD8Z3-1", Body: []byte{0x81, 0xa9, 'w', 'o', 'r', 'k', 'e', 'r', '_', 'i', 'd', 0xa1, 'w'}},
		{Endpoint: "/v1/daemon/hello", Headers: map[string]string{"X-LS-Daemon-Authorization": "Bearer t"}, Body: []byte{0x80}},
		{Endpoint: "/v1/daemon/exec/e1/chunk", ContentType: "application/octet-stream", ID: "a.b", Body: []byte("log line\n")},
		{Endpoint: "/v1/daemon/ack"},
	}
	var out [][]byte
	for _, r := range reqs {
		out = append(out, marshal(t, r))
	}
	return out
}

func FuzzDecoder(f *testing.F) {
	reqs := seedRequests(f)
	f.Add(encodeAll(reqs...), uint16(1))
	f.Add(encodeAll(reqs[0], nil, reqs[1]), uint16(3))
	f.Add(append(encodeAll(reqs[2]), 0, 0, 1), uint16(5))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2}, uint16(2))
	f.Add([]byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint16) {
		// Reference: Split over the whole stream.
		var want [][]byte
		var wantErr error
		consumed := 0
		for rest := stream; len(rest) > 0; {
			p, r, err := Split(rest)
			if err != nil {
				wantErr = err
				break
			}
			want = append(want, p)
			consumed += HeaderSize + len(p)
			rest = r
		}
		var d Decoder
		got, err := drain(t, &d, stream, max(int(chunk), 1))
		if !cmp.Equal(wantErr, err) {
			t.Fatalf("decoder error %v, Split error %v", err, wantErr)
		}
		if len(want) == 0 {
			want = nil
		}
		if !cmp.Equal(want, got, cmp.Comparer(bytes.Equal)) {
			t.Fatalf("decoder frames differ from Split's")
		}
		// Memory is bounded by the bytes fed, never by announced lengths.
		if cap(d.buf) > 2*len(stream)+64 {
			t.Fatalf("buffer capacity %d for a %d-byte stream", cap(d.buf), len(stream))
		}
		// encode(decode(x)) gives back the consumed bytes.
		if re := encodeAll(got...); !bytes.Equal(re, stream[:consumed]) {
			t.Fatalf("re-encoded frames differ from the stream")
		}
	})
}

func FuzzEnvelope(f *testing.F) {
	for _, p := range seedRequests(f) {
		f.Add(p, uint16(len(p)))
		f.Add(p, uint16(3))
	}
	for _, tt := range envCases(f) {
		f.Add(tt.payload, uint16(len(tt.payload)/2))
	}
	f.Fuzz(func(t *testing.T, payload []byte, cut uint16) {
		full, fullErr := ReadEnvelope(payload, len(payload))
		var short *ShortError
		if errors.As(fullErr, &short) {
			t.Fatalf("ShortError %v with the whole payload", fullErr)
		}
		checkPrefix(t, payload, min(int(cut), len(payload)), full, fullErr)
		if fullErr != nil {
			return
		}
		if full.BodyOffset < 0 || full.BodyLen < 0 || full.BodyOffset+full.BodyLen > len(payload) {
			t.Fatalf("body [%d:+%d] outside a %d-byte payload", full.BodyOffset, full.BodyLen, len(payload))
		}
		// What the envelope reader accepts, the full decoder agrees with
		// whenever it can decode it too (it is stricter about nil and str).
		var req wire.RelayRequest
		if rest, err := req.UnmarshalMsg(payload); err == nil && len(rest) == 0 {
			got := Envelope{Endpoint: req.Endpoint, Headers: req.Headers, ContentType: req.ContentType, ID: req.ID,
				BodyOffset: full.BodyOffset, BodyLen: full.BodyLen}
			if len(full.Headers) == 0 && len(got.Headers) == 0 {
				got.Headers = full.Headers
			}
			if diff := cmp.Diff(full, got); diff != "" {
				t.Fatalf("envelope vs full decode (-reader +decoder):\n%s", diff)
			}
			if !bytes.Equal(req.Body, payload[full.BodyOffset:full.BodyOffset+full.BodyLen]) {
				t.Fatalf("body differs from the full decode")
			}
			// decode(encode(x)) == x.
			enc := marshal(t, &req)
			again, err := ReadEnvelope(enc, len(enc))
			if err != nil {
				t.Fatalf("re-encoded envelope: %v", err)
			}
			if diff := cmp.Diff(got, again, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(Envelope{}, "BodyOffset")); diff != "" {
				t.Fatalf("decode(encode(x)) (-want +got):\n%s", diff)
			}
		}
	})
}

// FuzzDecoderAbandon checks Abandon against Split: a stream cut at any
// point and abandoned there gives exactly the frames after the one the
// cut fell in (all of those after the cut, when it fell on a boundary),
// fed in pieces of any size, and never holds more than a piece beyond a
// frame.
func FuzzDecoderAbandon(f *testing.F) {
	reqs := seedRequests(f)
	f.Add(encodeAll(reqs...), uint16(7), uint16(3))
	f.Add(encodeAll(reqs[0], nil, reqs[1]), uint16(2), uint16(1))
	f.Add(encodeAll(bytes.Repeat([]byte("x"), 5000), reqs[2]), uint16(100), uint16(4096))
	f.Fuzz(func(t *testing.T, stream []byte, cutAt, chunk uint16) {
		var bounds []int // frame ends
		var frames [][]byte
		for rest, off := stream, 0; len(rest) > 0; {
			p, r, err := Split(rest)
			if err != nil {
				stream = stream[:off] // only whole frames
				break
			}
			frames = append(frames, p)
			off += HeaderSize + len(p)
			bounds = append(bounds, off)
			rest = r
		}
		cut := int(cutAt) % (len(stream) + 1)
		var want [][]byte
		before := 0 // frames wholly before the cut
		for before < len(bounds) && bounds[before] <= cut {
			before++
		}
		first := before
		if before < len(bounds) && cut > 0 && (before == 0 || bounds[before-1] < cut) {
			first++ // the cut fell inside frame `before`: it is abandoned
		}
		want = append(want, frames[first:]...)
		var d Decoder
		d.Feed(stream[:cut])
		for range before {
			if _, ok, err := d.Next(); !ok || err != nil {
				t.Fatalf("a whole frame before the cut did not come out: %v", err)
			}
		}
		d.Abandon()
		got, err := drain(t, &d, stream[cut:], max(int(chunk), 1))
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			want = nil
		}
		if !cmp.Equal(want, got, cmp.Comparer(bytes.Equal)) {
			t.Fatalf("cut %d: frames %d, want %d", cut, len(got), len(want))
		}
	})
}
