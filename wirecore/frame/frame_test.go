package frame

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nymphd/nymph/wirecore/wire"
)

func encodeAll(payloads ...[]byte) []byte {
	var b []byte
	for _, p := range payloads {
		b = Append(b, p)
	}
	return b
}

func TestAppendLayout(t *testing.T) {
	tests := []struct {
		payload []byte
		want    []byte
	}{
		{nil, []byte{0, 0, 0, 0}},
		{[]byte("a"), []byte{0, 0, 0, 1, 'a'}},
		{bytes.Repeat([]byte{7}, 258), append([]byte{0, 0, 1, 2}, bytes.Repeat([]byte{7}, 258)...)},
	}
	for _, tt := range tests {
		got := Append([]byte("x"), tt.payload)
		if diff := cmp.Diff(append([]byte("x"), tt.want...), got); diff != "" {
			t.Errorf("Append(%d bytes) (-want +got):\n%s", len(tt.payload), diff)
		}
	}
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		h       [4]byte
		want    int
		wantErr error
	}{
		{[4]byte{0, 0, 0, 0}, 0, nil},
		{[4]byte{0x10, 0, 0, 0}, MaxPayload, nil},
		{[4]byte{0x10, 0, 0, 1}, 0, &TooLargeError{Length: MaxPayload + 1}},
		{[4]byte{0xff, 0xff, 0xff, 0xff}, 0, &TooLargeError{Length: 0xffffffff}},
	}
	for _, tt := range tests {
		got, err := ParseHeader(tt.h)
		if got != tt.want || !cmp.Equal(err, tt.wantErr) {
			t.Errorf("ParseHeader(% x) = %d, %v; want %d, %v", tt.h, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestAppendHeaderPanicsOverCeiling(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("AppendHeader(MaxPayload+1) did not panic")
		}
	}()
	AppendHeader(nil, MaxPayload+1)
}

func TestBeginEnd(t *testing.T) {
	buf, at := Begin([]byte("prefix"))
	buf = append(buf, "hello"...)
	if err := End(buf, at); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append([]byte("prefix"), Append(nil, []byte("hello"))...), buf); diff != "" {
		t.Errorf("Begin/End (-want +got):\n%s", diff)
	}
}

func TestSplit(t *testing.T) {
	stream := encodeAll([]byte("one"), nil, []byte("three"))
	var got []string
	for rest := stream; len(rest) > 0; {
		p, r, err := Split(rest)
		if err != nil {
			t.Fatalf("Split: %v", err)
		}
		got = append(got, string(p))
		rest = r
	}
	if diff := cmp.Diff([]string{"one", "", "three"}, got); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	_, _, err := Split(stream[:5])
	if diff := cmp.Diff(&TruncatedError{Have: 5, Want: 7}, err); diff != "" {
		t.Errorf("Split of a cut frame (-want +got):\n%s", diff)
	}
}

// drain feeds stream to d in pieces of size chunk and returns copies of
// the payloads it yields.
func drain(t testing.TB, d *Decoder, stream []byte, chunk int) ([][]byte, error) {
	var got [][]byte
	for len(stream) > 0 {
		n := min(chunk, len(stream))
		d.Feed(stream[:n])
		stream = stream[n:]
		for {
			p, ok, err := d.Next()
			if err != nil {
				return got, err
			}
			if !ok {
				break
			}
			got = append(got, bytes.Clone(p))
		}
	}
	return got, d.Finish()
}

// countFrames is drain without keeping payloads, to count allocations.
func countFrames(d *Decoder, stream []byte, chunk int) int {
	frames := 0
	for len(stream) > 0 {
		n := min(chunk, len(stream))
		d.Feed(stream[:n])
		stream = stream[n:]
		for {
			_, ok, err := d.Next()
			if err != nil || !ok {
				break
			}
			frames++
		}
	}
	return frames
}

func TestDecoderPieces(t *testing.T) {
	payloads := [][]byte{{}, []byte("a"), bytes.Repeat([]byte("xy"), 150), bytes.Repeat([]byte{1, 2, 3}, 9000/3), {}}
	stream := encodeAll(payloads...)
	for _, chunk := range []int{1, 2, 3, 4, 5, 7, 64, 4096, len(stream)} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			var d Decoder
			got, err := drain(t, &d, stream, chunk)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := cmp.Diff(payloads, got, cmp.Comparer(bytes.Equal)); diff != "" {
				t.Errorf("payloads (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecoderErrors(t *testing.T) {
	tests := []struct {
		name   string
		stream []byte
		frames int
		want   error
	}{
		{"empty", nil, 0, nil},
		{"half header", []byte{0, 0}, 0, &TruncatedError{Have: 2, Want: 4}},
		{"cut payload", append(encodeAll([]byte("ok")), 0, 0, 0, 10, 'a', 'b', 'c'), 1, &TruncatedError{Have: 7, Want: 14}},
		{"header only", []byte{0, 0, 0, 3}, 0, &TruncatedError{Have: 4, Want: 7}},
		{"oversize", []byte{0x10, 0, 0, 1, 'x'}, 0, &TooLargeError{Length: MaxPayload + 1}},
		{"oversize after a frame", append(encodeAll([]byte("ok")), 0xff, 0xff, 0xff, 0xff), 1, &TooLargeError{Length: 0xffffffff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{1, 3, 1 << 20} {
				var d Decoder
				got, err := drain(t, &d, tt.stream, chunk)
				if len(got) != tt.frames {
					t.Errorf("chunk %d: %d frames, want %d", chunk, len(got), tt.frames)
				}
				if diff := cmp.Diff(tt.want, err); diff != "" {
					t.Errorf("chunk %d: error (-want +got):\n%s", chunk, diff)
				}
			}
		})
	}
}

// An oversize header must be refused as soon as its four bytes are in,
// with nothing sized by the announced length.
func TestDecoderRefusesOversizeBeforeAllocating(t *testing.T) {
	var d Decoder
	allocs := testing.AllocsPerRun(10, func() {
		d.Reset()
		d.Feed([]byte{0xff, 0xff, 0xff, 0xf0})
		if _, _, err := d.Next(); err == nil {
			t.Fatal("no error for an oversize header")
		}
		d.Feed(make([]byte, 100)) // discarded: the stream is out of step
	})
	var tl *TooLargeError
	if _, _, err := d.Next(); !errors.As(err, &tl) || tl.Length != 0xfffffff0 {
		t.Fatalf("Next = %v, want TooLargeError{0xfffffff0}", err)
	}
	if cap(d.buf) > 64 {
		t.Errorf("buffer capacity %d after an oversize header", cap(d.buf))
	}
	if allocs > 1 {
		t.Errorf("%v allocations per oversize header", allocs)
	}
	d.Reset()
	if got, err := drain(t, &d, encodeAll([]byte("after reset")), 2); err != nil || len(got) != 1 {
		t.Errorf("after Reset: %d frames, %v", len(got), err)
	}
}

func TestDecoderSteadyStateAllocatesNothing(t *testing.T) {
	for _, size := range []int{64, 64 << 10} {
		stream := encodeAll(make([]byte, size), make([]byte, size/2))
		for _, chunk := range []int{len(stream), 1000, 3} {
			if chunk == 3 && size > 64 {
				continue // byte-sized pieces of a large frame: covered by TestDecoderPieces
			}
			var d Decoder
			drain(t, &d, stream, chunk) // warm the buffer up
			allocs := testing.AllocsPerRun(20, func() {
				if n := countFrames(&d, stream, chunk); n != 2 {
					t.Fatalf("%d frames, want 2", n)
				}
			})
			if allocs != 0 {
				t.Errorf("size %d chunk %d: %v allocations per round, want 0", size, chunk, allocs)
			}
		}
	}
}

func TestEncodeAllocatesNothing(t *testing.T) {
	req := &wire.RelayRequest{
		Endpoint: "/v1/daemon/poll", ID: "01JABCDEF-1",
		Headers: map[string]string{"X-LS-Signature": "sig"},
		Body:    bytes.Repeat([]byte{0x80}, 100),
	}
	buf := make([]byte, 0, 4096)
	payload := make([]byte, 64)
	allocs := testing.AllocsPerRun(50, func() {
		buf = Append(buf[:0], payload)
		var err error
		if buf, err = AppendMsg(buf[:0], req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per encode, want 0", allocs)
	}
	p, _, err := Split(buf)
	if err != nil {
		t.Fatal(err)
	}
	var back wire.RelayRequest
	if _, err := back.UnmarshalMsg(p); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(req, &back); diff != "" {
		t.Errorf("decode(encode(x)) (-want +got):\n%s", diff)
	}
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"01JABC.1", true},
		{"01HXYZ-42", true},
		{"A-b_c.9", true},
		{"boot.1_2-3", true},
		{"x.y.z", true},
		{"", false},
		{".a", false},
		{".hidden", false},
		{"-a", false},
		{"_a", false},
		{"a..b", false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
		{"a\x00", false},
		{strings.Repeat("a", MaxID), true},
		{strings.Repeat("a", MaxID+1), false},
	} {
		if got := ValidID(tc.id); got != tc.ok {
			t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.ok)
		}
	}
}

// An abandoned frame is skipped whole, however its bytes are cut (before
// the header has all come, mid-payload, or with the next frames in the
// same piece), without being held, and the frames after it come out.
func TestDecoderAbandonSkipsTheFrame(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 100_000)
	stream := encodeAll(big, []byte("next"), []byte("after"))
	for _, cut := range []int{1, 3, 4, 5, 1000, len(stream) - 20} {
		for _, piece := range []int{1, 7, 4096, len(stream)} {
			var d Decoder
			d.Feed(stream[:cut])
			if _, ok, _ := d.Next(); ok {
				t.Fatalf("cut %d: a frame before the first one ended", cut)
			}
			d.Abandon()
			var got []string
			for off := cut; off < len(stream); off += piece {
				d.Feed(stream[off:min(off+piece, len(stream))])
				if d.Buffered() > 4096+piece {
					t.Fatalf("cut %d piece %d: %d bytes held while skipping", cut, piece, d.Buffered())
				}
				for {
					p, ok, err := d.Next()
					if err != nil {
						t.Fatalf("cut %d piece %d: %v", cut, piece, err)
					}
					if !ok {
						break
					}
					got = append(got, string(p))
				}
			}
			if want := []string{"next", "after"}; !cmp.Equal(got, want) {
				t.Fatalf("cut %d piece %d: frames %q, want %q", cut, piece, got, want)
			}
		}
	}
	// Nothing begun: nothing dropped.
	var d Decoder
	d.Abandon()
	d.Feed(encodeAll([]byte("whole")))
	if p, ok, _ := d.Next(); !ok || string(p) != "whole" {
		t.Fatalf("after an Abandon with nothing begun: %q %v", p, ok)
	}
}
