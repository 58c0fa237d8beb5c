package daemon

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Every text made of a refusal's body is bounded, whether it ends the
// daemon (a 4xx, a 422) or is logged on each retry (a 5xx): the body is
// a peer's.
func TestRefusalTextsAreBounded(t *testing.T) {
	long := strings.Repeat("x", 10*wire.MaxRefusalText)
	msgpack, err := (&wire.ValidationError{Error: "worker_limit", Message: long}).MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	withField := mustJSON(t, wire.ValidationError{Error: "too_long", Field: "labels", Message: long})
	for name, text := range map[string]string{
		"statusText":            statusText(503, msgpack),
		"refusalText":           refusalText(403, msgpack),
		"validationText":        validationText(msgpack),
		"validationText, field": validationText(withField),
	} {
		if !strings.HasSuffix(text, "…") || len(text) > wire.MaxRefusalText+len("invalid field labels: …") {
			t.Errorf("%s: %d bytes, not cut at %d: %.60q…", name, len(text), wire.MaxRefusalText, text)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
