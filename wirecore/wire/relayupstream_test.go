package wire

import (
	"strings"
	"testing"
)

func TestParseRelayUpstream(t *testing.T) {
	fp := strings.Repeat("ab", 32)
	for in, want := range map[string]string{
		`{"server": "https://plane.example:8383", "ca_fingerprint": "` + fp + `"}`: "",
		`{"server": "http://127.0.0.1:8383/prefix", "ca_fingerprint": ""}`:         "",
		`{"server": "https://plane.example", "extra": 1}`:                          "",
		`{"server": "ftp://plane.example", "ca_fingerprint": ""}`:                  "server",
		`{"server": "https://", "ca_fingerprint": ""}`:                             "server",
		`{"server": "https://a", "ca_fingerprint": "` + strings.ToUpper(fp) + `"}`: "ca_fingerprint",
		`{"server": "https://a", "ca_fingerprint": "abc"}`:                         "ca_fingerprint",
		`not json`: "relay-upstream.json",
		`{"server": "https://a", "pad": "` + strings.Repeat("x", MaxRelayUpstreamBytes) + `"}`: "at most",
	} {
		ru, err := ParseRelayUpstream([]byte(in))
		switch {
		case want == "" && err != nil:
			t.Errorf("%.60s: %v", in, err)
		case want == "" && ru.Server == "":
			t.Errorf("%.60s: no server", in)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%.60s: %v, want an error about %s", in, err, want)
		}
	}
}
