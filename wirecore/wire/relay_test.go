package wire

import (
	"bytes"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// Relay bodies carry whole requests and replies (up to the 256 MiB frame
// ceiling), so the collection limit that guards arrays and maps must not
// apply to them.
func TestRelayBodiesAreNotCappedByTheCollectionLimit(t *testing.T) {
	big := bytes.Repeat([]byte{0xAB}, 1<<20)
	cases := map[string]struct {
		in, out interface {
			msgp.Marshaler
			msgp.Unmarshaler
			msgp.Decodable
		}
		body func(any) []byte
	}{
		"request": {&RelayRequest{Endpoint: PathPoll, Body: big}, &RelayRequest{}, func(v any) []byte { return v.(*RelayRequest).Body }},
		"reply":   {&RelayReply{ID: "a1", Status: 200, Body: big}, &RelayReply{}, func(v any) []byte { return v.(*RelayReply).Body }},
		"failure": {&RelayErrorReply{RelayError: RelayFailure{Status: 502, Body: big}}, &RelayErrorReply{}, func(v any) []byte { return v.(*RelayErrorReply).RelayError.Body }},
	}
	for name, c := range cases {
		b, err := c.in.MarshalMsg(nil)
		if err != nil {
			t.Fatalf("%s: marshal: %v", name, err)
		}
		if _, err := c.out.UnmarshalMsg(b); err != nil {
			t.Fatalf("%s: unmarshal a 1 MiB body: %v", name, err)
		}
		if !bytes.Equal(c.body(c.out), big) {
			t.Errorf("%s: unmarshal: body differs", name)
		}
		if err := c.out.DecodeMsg(msgp.NewReader(bytes.NewReader(b))); err != nil {
			t.Fatalf("%s: decode a 1 MiB body: %v", name, err)
		}
		if !bytes.Equal(c.body(c.out), big) {
			t.Errorf("%s: decode: body differs", name)
		}
	}
}

// A streamed head followed by the body is the whole message's encoding,
// for every body length form (bin8, bin16, bin32).
func TestStreamedHeadIsTheEncodingUpToTheBody(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 65535, 65536, 1 << 20} {
		body := bytes.Repeat([]byte{0x5A}, n)
		for name, c := range map[string]struct{ empty, full msgp.Marshaler }{
			"reply": {&RelayReply{ID: "r-1", Status: 200}, &RelayReply{ID: "r-1", Status: 200, Body: body}},
			"failure": {&RelayErrorReply{RelayError: RelayFailure{Status: 502, Message: "upstream answered 502"}},
				&RelayErrorReply{RelayError: RelayFailure{Status: 502, Message: "upstream answered 502", Body: body}}},
		} {
			head, err := AppendStreamedHead([]byte("prefix"), c.empty, n)
			if err != nil {
				t.Fatalf("%s/%d: %v", name, n, err)
			}
			want, _ := c.full.MarshalMsg([]byte("prefix"))
			if got := append(head, body...); !bytes.Equal(got, want) {
				t.Fatalf("%s/%d: head+body differs from the encoding", name, n)
			}
		}
	}
	for name, m := range map[string]msgp.Marshaler{
		"relay_error set": &RelayReply{ID: "r", RelayError: &RelayReplyError{Message: "x"}},
		"body set":        &RelayReply{ID: "r", Body: []byte("x")},
		"failure body":    &RelayErrorReply{RelayError: RelayFailure{Body: []byte("x")}},
		"other type":      &RelayRequest{Endpoint: PathPoll},
	} {
		if _, err := AppendStreamedHead(nil, m, 1); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := AppendStreamedHead(nil, &RelayReply{}, -1); err == nil {
		t.Error("negative length: no error")
	}
}
