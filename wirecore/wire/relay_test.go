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
