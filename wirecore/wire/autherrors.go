package wire

import "encoding/json"

// Refusals of a daemon request for its authentication or authorization
// (docs/protocol.md, "Request signatures"): the error of the {error,
// message} body of a 401 or 403. They are nymph's; a peer that does not
// know one still sees the status.
const (
	// ErrKeyRevoked: the key that signed the request is revoked (nymph ctl
	// revoke). The daemon exits with status 2: nothing it signs is
	// accepted again until it joins anew.
	ErrKeyRevoked = "key_revoked"
)

// ErrorCode reads the error and message of a control plane's {error,
// message} body, msgpack or JSON; both are empty when the body is
// neither.
func ErrorCode(body []byte) (code, message string) {
	var v ValidationError
	if len(body) == 0 {
		return "", ""
	}
	if _, err := v.UnmarshalMsg(body); err == nil && v.Error != "" {
		return v.Error, v.Message
	}
	v = ValidationError{}
	if err := json.Unmarshal(body, &v); err == nil {
		return v.Error, v.Message
	}
	return "", ""
}
