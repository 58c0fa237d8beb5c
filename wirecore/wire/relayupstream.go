package wire

import (
	"encoding/json"
	"fmt"
	"net/url"
)

// RelayUpstreamFile is the file a relay writes in its prefix when it
// starts (PREFIX/relay-upstream.json, mode 0644, replaced atomically): the
// control plane it forwards to and the fingerprint of the CA it verifies
// that plane by. A daemon behind the relay (its relay_dir is
// PREFIX/<machine_id>, so the file is ../relay-upstream.json from there)
// reads it to check a join token's pin before the token's secret leaves
// the host: the relay, not the daemon, holds the TLS connection.
const RelayUpstreamFile = "relay-upstream.json"

// MaxRelayUpstreamBytes bounds the file before it is parsed.
const MaxRelayUpstreamBytes = 4 << 10

// RelayUpstream is the content of RelayUpstreamFile, as JSON:
//
//	{"server": "https://plane.example:8383", "ca_fingerprint": "<64 hex>"}
//
// CAFingerprint is identity.SPKIFingerprint of the relay's CA file (the
// first certificate in it), lowercase hex; it is empty when the relay
// trusts the system's roots or its upstream is plain http.
type RelayUpstream struct {
	Server        string `json:"server"`
	CAFingerprint string `json:"ca_fingerprint"`
}

// ParseRelayUpstream reads RelayUpstreamFile's bytes and checks them: an
// http(s) server URL with a host, and a fingerprint that is empty or 64
// lowercase hex digits.
func ParseRelayUpstream(data []byte) (RelayUpstream, error) {
	var ru RelayUpstream
	if len(data) > MaxRelayUpstreamBytes {
		return ru, fmt.Errorf("wire: %s: %d bytes, at most %d", RelayUpstreamFile, len(data), MaxRelayUpstreamBytes)
	}
	if err := json.Unmarshal(data, &ru); err != nil {
		return RelayUpstream{}, fmt.Errorf("wire: %s: %w", RelayUpstreamFile, err)
	}
	u, err := url.Parse(ru.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return RelayUpstream{}, fmt.Errorf("wire: %s: server %q: want an http:// or https:// URL with a host", RelayUpstreamFile, ru.Server)
	}
	if fp := ru.CAFingerprint; fp != "" && !lowerHex(fp, 64) {
		return RelayUpstream{}, fmt.Errorf("wire: %s: ca_fingerprint %q: want 64 lowercase hex digits or nothing", RelayUpstreamFile, fp)
	}
	return ru, nil
}

func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
