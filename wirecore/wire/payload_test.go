package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// An exec's payload: inline up to exactly the threshold, a ref checked for
// its fields, never both.
func TestCheckExecPayload(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	bad := "xyz"
	ref := &wire.PayloadRef{Bucket: "default", Key: "k", Size: 10, SHA256: &sha}
	for name, tc := range map[string]struct {
		inline []byte
		ref    *wire.PayloadRef
		ok     bool
	}{
		"none":                {nil, nil, true},
		"inline at threshold": {make([]byte, wire.PayloadInlineThreshold), nil, true},
		"inline one over":     {make([]byte, wire.PayloadInlineThreshold+1), nil, false},
		"ref":                 {nil, ref, true},
		"both":                {[]byte("x"), ref, false},
		"ref without bucket":  {nil, &wire.PayloadRef{Key: "k"}, false},
		"ref without key":     {nil, &wire.PayloadRef{Bucket: "b"}, false},
		"ref over 100 MiB":    {nil, &wire.PayloadRef{Bucket: "b", Key: "k", Size: wire.PayloadMax + 1}, false},
		"ref at 100 MiB":      {nil, &wire.PayloadRef{Bucket: "b", Key: "k", Size: wire.PayloadMax}, true},
		"ref with a bad sha":  {nil, &wire.PayloadRef{Bucket: "b", Key: "k", SHA256: &bad}, false},
	} {
		err := wire.CheckExecPayload(tc.inline, tc.ref)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, wire.ErrPayloadInvalid)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
