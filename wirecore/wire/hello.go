package wire

import (
	"encoding/json"

	"github.com/tinylib/msgp/msgp"
)

// Arrays and maps announced longer than this are refused before anything is
// allocated for them (a count is 4 bytes; its elements would be far more).
//msgp:limit arrays:65536 maps:65536

// Content types used on the wire.
const (
	ContentTypeMsgpack = "application/x-msgpack"
	ContentTypeOctets  = "application/octet-stream"
	ContentTypeJSON    = "application/json"
)

// The nine hello reject codes. A reject arrives as HTTP 200 with
// HelloResponse.Reject set, and aborts daemon startup.
const (
	RejectProtocolMismatch            = "protocol_mismatch"
	RejectEnrollTokenRequired         = "enroll_token_required"
	RejectInvalidEnrollToken          = "invalid_enroll_token"
	RejectEnrollTokenConsumed         = "enroll_token_consumed"
	RejectEnrollTokenExpired          = "enroll_token_expired"
	RejectEnrollSignatureRequired     = "enroll_signature_required"
	RejectKeyIDMismatch               = "key_id_mismatch"
	RejectEnrollSignatureInvalid      = "enroll_signature_invalid"
	RejectEnrollmentSignatureRequired = "enrollment_signature_required"
)

// RejectCodes lists the nine reject codes in the order the protocol names them.
var RejectCodes = [...]string{
	RejectProtocolMismatch, RejectEnrollTokenRequired, RejectInvalidEnrollToken,
	RejectEnrollTokenConsumed, RejectEnrollTokenExpired, RejectEnrollSignatureRequired,
	RejectKeyIDMismatch, RejectEnrollSignatureInvalid, RejectEnrollmentSignatureRequired,
}

// HelloRequest is the body of POST /v1/daemon/hello.
type HelloRequest struct {
	MachineID    string       `msg:"machine_id"`
	Label        string       `msg:"label"`
	Tags         []string     `msg:"tags"`
	Lanes        []string     `msg:"lanes,omitempty,allownil"`
	Capabilities Capabilities `msg:"capabilities"`
	Versions     Versions     `msg:"versions"`
	// PublicKey is the raw 32-byte Ed25519 key, base64url without padding;
	// absent from the wire when the daemon has no identity.
	PublicKey *string `msg:"public_key,omitempty"`
	// Extensions names the nymph extensions the daemon speaks (see
	// extensions.go); absent when none, so a plain protocol "1" hello is
	// unchanged.
	Extensions []string `msg:"nymph_extensions,omitempty"`
	// Cursor (extension ExtCursor) is the last command cursor the daemon
	// applied before this hello, kept across its restarts; absent when it
	// has applied none.
	Cursor *string `msg:"nymph_cursor,omitempty"`
}

// Capabilities is what a host can actually run.
type Capabilities struct {
	Runners        []string `msg:"runners"`
	MaxInvocations Int      `msg:"max_invocations"`
	Workdir        string   `msg:"workdir"`
}

// Versions is probed once at boot; every key is always present, and null
// when its probe did not resolve.
type Versions struct {
	Daemon   *string `msg:"daemon"`
	Protocol *string `msg:"protocol"`
	Runsc    *string `msg:"runsc"`
	Docker   *string `msg:"docker"`
	Python   *string `msg:"python"`
	Kernel   *string `msg:"kernel"`
	Distro   *string `msg:"distro"`
	Arch     *string `msg:"arch"`
	CPU      *CPU    `msg:"cpu"`
	GPU      []GPU   `msg:"gpu,allownil"`
}

// CPU is the /proc/cpuinfo summary; Cores counts logical cores.
type CPU struct {
	Model string `msg:"model"`
	Cores Int    `msg:"cores"`
}

// GPU is one nvidia-smi row plus the CUDA version of the header.
type GPU struct {
	Name   string  `msg:"name"`
	Driver string  `msg:"driver"`
	CUDA   *string `msg:"cuda"`
}

// HelloResponse is the reply to a hello. A non-nil Reject aborts startup.
type HelloResponse struct {
	WorkerID           *string             `msg:"worker_id"`
	SessionToken       *string             `msg:"session_token"`
	SessionTTLS        Number              `msg:"session_ttl_s"`
	Config             map[string]msgp.Raw `msg:"config,allownil"`
	Cursor             *string             `msg:"cursor"`
	Reject             *Reject             `msg:"reject"`
	KeyID              *string             `msg:"key_id"`
	KeyRotationMaxAgeS Number              `msg:"key_rotation_max_age_s"`
	ServerTimeEpochS   *Number             `msg:"server_time_epoch_s"`
}

// Reject is a hello refusal: one of the nine codes and a human message.
type Reject struct {
	Code    string `msg:"code"`
	Message string `msg:"message"`
}

// ValidationError is the body of a 422 answer to a malformed request:
// Field is a dotted path such as "capabilities.runners".
type ValidationError struct {
	Error string `msg:"error" json:"error"`
	Field string `msg:"field" json:"field"`
	// Message says in words what is wrong and what the limit is; nymph
	// adds it to the protocol's {error, field}, and reads a 422 without
	// it.
	Message string `msg:"message,omitempty" json:"message,omitempty"`
}

// ReadRefusal reads a refusal's {error, field, message} body, msgpack or
// JSON (whichever the control plane answered in, or a relay's own
// refusal as its client hands it on: ErrRelayRefused); ok is false when
// it is neither.
func ReadRefusal(body []byte) (v ValidationError, ok bool) {
	if len(body) == 0 {
		return v, false
	}
	if _, err := v.UnmarshalMsg(body); err == nil && v.Error != "" {
		return v, true
	}
	v = ValidationError{}
	if err := json.Unmarshal(body, &v); err == nil && v.Error != "" {
		return v, true
	}
	return ValidationError{}, false
}
