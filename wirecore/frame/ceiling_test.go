package frame

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// header returns the 4-byte header announcing n payload bytes, written by
// hand so that it can announce more than AppendHeader allows.
func header(n uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, n)
}

// A frame of exactly MaxPayload bytes is legal: the incremental decoder
// must wait for its payload, not refuse it; one byte more is refused.
func TestDecoderCeiling(t *testing.T) {
	var d Decoder
	start := []byte("first bytes of the payload")
	d.Feed(header(MaxPayload))
	d.Feed(start)
	if p, ok, err := d.Next(); p != nil || ok || err != nil {
		t.Fatalf("Next after a MaxPayload header = %d bytes, %v, %v; want to wait for more", len(p), ok, err)
	}
	want := &TruncatedError{Have: HeaderSize + len(start), Want: HeaderSize + MaxPayload}
	if diff := cmp.Diff(want, d.Finish()); diff != "" {
		t.Errorf("Finish inside a MaxPayload frame (-want +got):\n%s", diff)
	}

	d.Reset()
	d.Feed(header(MaxPayload + 1))
	if _, ok, err := d.Next(); ok || !cmp.Equal(err, &TooLargeError{Length: MaxPayload + 1}) {
		t.Fatalf("Next after a MaxPayload+1 header = %v, %v; want TooLargeError{%d}", ok, err, MaxPayload+1)
	}
}

func TestSplitCeiling(t *testing.T) {
	p := append(header(MaxPayload), 'x')
	_, rest, err := Split(p)
	if diff := cmp.Diff(&TruncatedError{Have: HeaderSize + 1, Want: HeaderSize + MaxPayload}, err); diff != "" {
		t.Errorf("Split of a cut MaxPayload frame (-want +got):\n%s", diff)
	}
	if len(rest) != len(p) {
		t.Errorf("Split consumed %d bytes of a cut frame", len(p)-len(rest))
	}

	p = append(header(MaxPayload+1), 'x')
	if _, _, err := Split(p); !cmp.Equal(err, &TooLargeError{Length: MaxPayload + 1}) {
		t.Errorf("Split of a MaxPayload+1 header = %v; want TooLargeError{%d}", err, MaxPayload+1)
	}
}

// The writers hold the same ceiling as the readers: a MaxPayload frame can
// be written, one byte more cannot.
func TestAppendHeaderCeiling(t *testing.T) {
	var got []byte
	if v := panicValue(func() { got = AppendHeader(nil, MaxPayload) }); v != nil {
		t.Fatalf("AppendHeader(MaxPayload) panicked: %v", v)
	}
	if diff := cmp.Diff(header(MaxPayload), got); diff != "" {
		t.Errorf("AppendHeader(MaxPayload) (-want +got):\n%s", diff)
	}
	if panicValue(func() { AppendHeader(nil, MaxPayload+1) }) == nil {
		t.Error("AppendHeader(MaxPayload+1) did not panic")
	}
}

// panicValue runs f and returns what it panicked with, nil if it returned.
func panicValue(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestEndCeiling(t *testing.T) {
	// One buffer serves both sides: End looks only at its length.
	buf, at := Begin(make([]byte, 0, HeaderSize+MaxPayload+1))
	buf = buf[:HeaderSize+MaxPayload]
	if err := End(buf, at); err != nil {
		t.Fatalf("End of a MaxPayload frame: %v", err)
	}
	if n, err := ParseHeader([HeaderSize]byte(buf)); n != MaxPayload || err != nil {
		t.Errorf("End wrote a header announcing %d, %v; want %d", n, err, MaxPayload)
	}

	buf, at = Begin(buf[:0])
	buf = buf[:HeaderSize+MaxPayload+1]
	var tl *TooLargeError
	if err := End(buf, at); !errors.As(err, &tl) || tl.Length != MaxPayload+1 {
		t.Fatalf("End of a MaxPayload+1 frame = %v; want TooLargeError{%d}", err, MaxPayload+1)
	}
	if n, _ := ParseHeader([HeaderSize]byte(buf)); n != 0 {
		t.Errorf("End refused the frame but changed its header to announce %d", n)
	}
}
