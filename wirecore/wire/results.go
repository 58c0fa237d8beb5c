package wire

import "github.com/tinylib/msgp/msgp"

// Arrays and maps announced longer than this are refused before anything is
// allocated for them (a count is 4 bytes; its elements would be far more).
//msgp:limit arrays:65536 maps:65536

// Error types the daemon itself produces in Ack.Error.Type.
const (
	ErrTypeDaemon            = "DaemonError"
	ErrTypeCancelled         = "Cancelled"
	ErrTypeScriptFailed      = "ScriptFailed"
	ErrTypeRunnerUnavailable = "RunnerUnavailable"
	ErrTypeImageRequired     = "ImageRequired"
	ErrTypeRegistryAuth      = "RegistryAuthFailed"
	ErrTypeWorkerLost        = "WorkerLost"
	// ErrTypePayload: the run's payload_ref could not be resolved (refused,
	// not downloaded, or its sha256 or size disagreed); no child ran.
	ErrTypePayload = "PayloadError"
)

// CancelledMessage is the message of an invocation killed at the end of the
// shutdown grace.
const CancelledMessage = "daemon shutdown grace expired"

// Ack is the body of POST /v1/daemon/ack: the terminal outcome of one run.
type Ack struct {
	InvocationID string `msg:"invocation_id"`
	// State is StateSucceeded, StateFailed or StateKilled.
	State string `msg:"state"`
	// ResultBlob is empty unless the run succeeded. Decoded, it shares the
	// bytes it was decoded from (SharedBlob).
	ResultBlob SharedBlob `msg:"result_blob"`
	Error      *ErrorInfo `msg:"error"`
	WorkerID   string     `msg:"worker_id,omitempty"`
}

// ErrorInfo is a structured error, never a bare string. The wire key of
// TypeName is "type" (a Go keyword, hence the field name).
type ErrorInfo struct {
	TypeName  string  `msg:"type" json:"type"`
	Message   string  `msg:"message" json:"message"`
	Traceback *string `msg:"traceback,omitempty" json:"traceback,omitempty"`
}

// Exec result sentinels for ExecResult.ExitCode.
const (
	ExitSpawnFailed = -1 // spawn failure, wait error, or cancellation at shutdown
	ExitTimeout     = -2 // the exec ran past its timeout_s
)

// Exec result truncation messages for ExecResult.Error.
const (
	TruncatedStdout = "stdout truncated"
	TruncatedStderr = "stderr truncated"
	TruncatedBoth   = "stdout truncated; stderr truncated"
)

// ExecResult is the body of POST /v1/daemon/exec/{exec_id}/result.
type ExecResult struct {
	ExitCode   Int     `msg:"exit_code" json:"exit_code"`
	Stdout     string  `msg:"stdout" json:"stdout"`
	Stderr     string  `msg:"stderr" json:"stderr"`
	DurationMS Int     `msg:"duration_ms" json:"duration_ms"`
	Error      *string `msg:"error,omitempty" json:"error,omitempty"`
	// ResultInline and ResultRef are always null: the shell path has no
	// typed return value.
	ResultInline msgp.Raw `msg:"result_inline" json:"-"`
	ResultRef    msgp.Raw `msg:"result_ref" json:"-"`
}

// PresignRequest is the body of POST /v1/namespaces/{ns}/payloads/presign.
// Its keys are camelCase on the wire.
type PresignRequest struct {
	Op    string `msg:"op" json:"op"`
	Key   string `msg:"key,omitempty" json:"key,omitempty"`
	Size  *Int   `msg:"size,omitempty" json:"size,omitempty"`
	JobID string `msg:"jobId,omitempty" json:"jobId,omitempty"`
	Kind  string `msg:"kind,omitempty" json:"kind,omitempty"`
	// Overwrite lets a put replace a key that exists (nymph; absent, nil
	// and false refuse it with 409, see docs/protocol.md "Payload store").
	Overwrite *bool `msg:"overwrite,omitempty" json:"overwrite,omitempty"`
}

// PresignResponse answers a presign: an expiring URL to GET or PUT.
type PresignResponse struct {
	URL       string            `msg:"url" json:"url"`
	Method    string            `msg:"method" json:"method"`
	Headers   map[string]string `msg:"headers" json:"headers"`
	ExpiresAt Int               `msg:"expiresAt" json:"expiresAt"`
}

// KeyRotationRequest is the body of POST /v1/daemon/keys, signed by the
// outgoing key.
type KeyRotationRequest struct {
	WorkerID     string `msg:"worker_id"`
	NewPublicKey string `msg:"new_public_key"`
	OldKeyID     string `msg:"old_key_id,omitempty"`
}

// KeyRotationResponse answers a key rotation with the new key's id. A
// refusal may carry key_id nil (Text reads it as empty), so its reason is
// read rather than a decode error.
type KeyRotationResponse struct {
	KeyID  Text    `msg:"key_id"`
	Reject *Reject `msg:"reject"`
}
