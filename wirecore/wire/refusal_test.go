package wire_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nymphd/nymph/wirecore/wire"
)

// A refusal reads as its code and its message in parentheses, the
// message left out when there is none.
func TestRefusalText(t *testing.T) {
	for _, tc := range []struct {
		v    wire.ValidationError
		want string
	}{
		{wire.ValidationError{Error: "worker_limit", Message: "64 workers at most"}, "worker_limit (64 workers at most)"},
		{wire.ValidationError{Error: "unknown_worker"}, "unknown_worker"},
		{wire.ValidationError{Error: "too_long", Field: "labels", Message: "over 64 bytes"}, "too_long (over 64 bytes)"},
	} {
		if got := tc.v.Text(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.want)
		}
	}
}

// A peer's long message is cut to MaxRefusalText bytes, never inside a
// character.
func TestRefusalTextIsBounded(t *testing.T) {
	v := wire.ValidationError{Error: "e", Message: strings.Repeat("é", 1000)}
	got := v.Text()
	body, ok := strings.CutSuffix(got, "…")
	if !ok {
		t.Fatalf("a cut text is not marked: %q", got)
	}
	if len(body) > wire.MaxRefusalText || len(body) < wire.MaxRefusalText-3 {
		t.Fatalf("%d bytes kept, want about %d", len(body), wire.MaxRefusalText)
	}
	if !strings.HasPrefix(got, "e (éé") || !utf8.ValidString(got) {
		t.Fatalf("cut inside a character: %q", got)
	}
}
