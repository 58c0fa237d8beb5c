// Package operator holds the JSON types of `nymph serve`'s operator API —
// the routes `nymph ctl` uses — and their paths. Both sides import it, so
// the server and the CLI cannot drift apart.
//
// It decides shapes and paths only. The control-plane state machine
// (wirecore/plane) decides what an operator request does.
//
// Every route takes `Authorization: Bearer <admin token>` and answers JSON.
// Errors are an Error body with a 4xx/5xx status.
package operator

import (
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Routes, relative to the server's base URL. {id} segments are path-escaped.
const (
	PathWorkers     = "/v1/admin/workers"            // GET → []Worker
	PathWorker      = "/v1/admin/workers/{id}"       // GET → Worker; DELETE → WorkerForgotten (a lost worker only, else 409)
	PathExec        = "/v1/admin/workers/{id}/exec"  // POST ExecRequest → ExecAccepted
	PathSetup       = "/v1/admin/workers/{id}/setup" // POST SetupRequest → CommandAccepted
	PathHibernate   = "/v1/admin/workers/{id}/hibernate"
	PathReset       = "/v1/admin/workers/{id}/reset"      // POST {} → CommandAccepted
	PathUpdate      = "/v1/admin/workers/{id}/update"     // POST UpdateRequest → CommandAccepted
	PathRotateKey   = "/v1/admin/workers/{id}/rotate-key" // POST {} → CommandAccepted
	PathConfig      = "/v1/admin/workers/{id}/config"     // POST ConfigRequest → Worker
	PathExecStatus  = "/v1/admin/execs/{id}"              // GET → ExecStatus
	PathExecLogs    = "/v1/admin/execs/{id}/logs"         // GET ?offset=N&wait_s=S → LogsPage
	PathInvocations = "/v1/admin/invocations"             // GET → []Invocation; POST RunRequest → Invocation
	PathInvocation  = "/v1/admin/invocations/{id}"        // GET → Invocation
	// PathKill stops an invocation (optional body KillRequest): a queued
	// one is killed at once (200 → Invocation); a running one is sent a
	// cancel (202 → Invocation, still running until its daemon acks
	// killed) when its daemon speaks the cancel extension, else 409.
	PathKill = "/v1/admin/invocations/{id}/kill"
	// PathKillExec stops an exec the same way (→ ExecStatus): a queued
	// one ends at -1 without running (200), a delivered one is sent a
	// cancel (202) or refused (409).
	PathKillExec  = "/v1/admin/execs/{id}/kill"
	PathRevokeKey = "/v1/admin/workers/{id}/revoke-key" // POST {} → KeyRevoked, or 409 without a key
	PathTokens    = "/v1/admin/tokens"                  // POST TokenRequest → TokenCreated; GET → []Token
	// PathPresign presigns a payload put (or get) for an operator, with
	// the body and answer of the daemons' presign (wire.PresignRequest,
	// wire.PresignResponse): ctl uploads a large payload to the URL and
	// names it in a payload_ref.
	PathPresign = "/v1/admin/namespaces/{ns}/payloads/presign"
	// PathRelease serves a binary of serve --releases, or its SHA256SUMS,
	// with no credential asked for: a daemon checks what it downloads by
	// the sha256 of its ota_update.
	PathRelease = "/v1/releases/{name}" // GET → the file
	// PathMetrics is the control plane's metrics in the Prometheus text
	// format, for the admin bearer (a scraper's credentials_file).
	PathMetrics = "/metrics" // GET → text/plain; version=0.0.4
)

// Worker is one registered daemon as the control plane sees it.
type Worker struct {
	ID           string            `json:"id"`
	MachineID    string            `json:"machine_id"`
	Label        string            `json:"label"`
	Tags         []string          `json:"tags"`
	Queues       []string          `json:"queues"`
	Capabilities wire.Capabilities `json:"capabilities"`
	Versions     map[string]any    `json:"versions"`
	// State is "active", "setting_up", "hibernating" or "lost".
	State           string  `json:"state"`
	LastSeenEpochS  float64 `json:"last_seen_epoch_s"`
	PendingCommands int     `json:"pending_commands"`
	Running         int     `json:"running"`
	// KeyID is the worker's enrolled key; empty for a bearer worker.
	KeyID string `json:"key_id,omitempty"`
	// KeyRevoked says an operator revoked the worker's key: its machine
	// comes back only by joining with a new token.
	KeyRevoked bool `json:"key_revoked,omitempty"`
	// Update is the last ota_update sent to the worker; nil when none was.
	Update *UpdateStatus `json:"update,omitempty"`
	// LiveConfig is the worker's live configuration (PathConfig).
	LiveConfig map[string]string `json:"live_config,omitempty"`
	// Extensions are the nymph extensions agreed with its daemon.
	Extensions []string `json:"extensions"`
}

// ConfigRequest sets keys of a worker's live configuration
// (wire.LiveConfigKeys); a value of "" removes the key. Its daemon applies
// them without a restart when it speaks the config extension, else at
// none (the keys are kept for when it does).
type ConfigRequest struct {
	Set map[string]string `json:"set"`
}

// UpdateStatus is an ota_update's progress on one worker. State is
// "queued" (waiting for a poll), "delivered" (a poll took it; no hello
// since: downloading, or refused and running on — its daemon logs why),
// "rolled_back" (a hello after it reported another version) or "updated".
type UpdateStatus struct {
	Version  string  `json:"version"`
	From     string  `json:"from,omitempty"`
	State    string  `json:"state"`
	AtEpochS float64 `json:"at_epoch_s"`
	// Running is the version of the hello that settled it.
	Running string `json:"running,omitempty"`
}

// ExecRequest queues an exec on one worker.
type ExecRequest struct {
	Command  string            `json:"command"`
	Env      map[string]string `json:"env,omitempty"`
	Stdin    *string           `json:"stdin,omitempty"`
	Workdir  *string           `json:"workdir,omitempty"`
	TimeoutS *float64          `json:"timeout_s,omitempty"`
	// Stream asks the daemon to post log chunks as output is produced.
	Stream     bool `json:"stream,omitempty"`
	FlushMS    int  `json:"flush_ms,omitempty"`
	FlushBytes int  `json:"flush_bytes,omitempty"`
	// PayloadInline (at most wire.PayloadInlineThreshold bytes) or
	// PayloadRef (a blob uploaded through PathPresign) is the exec's
	// payload: the daemon hands it to the command as the file named by
	// wire.EnvPayload. At most one of them.
	PayloadInline []byte           `json:"payload_inline,omitempty"`
	PayloadRef    *wire.PayloadRef `json:"payload_ref,omitempty"`
}

// ExecAccepted names the exec id of a queued exec.
type ExecAccepted struct {
	ExecID    string `json:"exec_id"`
	CommandID string `json:"command_id"`
}

// ExecStatus is an exec's state; Result is set once the daemon posted it.
type ExecStatus struct {
	ExecID   string `json:"exec_id"`
	WorkerID string `json:"worker_id"`
	// State is "queued", "delivered" or "finished".
	State  string           `json:"state"`
	Result *wire.ExecResult `json:"result,omitempty"`
}

// LogsPage is a slice of an exec's streamed output starting at Offset.
// With wait_s the server holds the request until new bytes arrive, the
// exec finishes, or wait_s passes.
type LogsPage struct {
	Offset     int64  `json:"offset"`
	Data       []byte `json:"data"`
	NextOffset int64  `json:"next_offset"`
	// Done is true once the exec has finished and every chunk is in.
	Done bool `json:"done"`
}

// SetupRequest appends a setup script to the worker's pending-setup FIFO.
type SetupRequest struct {
	Script              string `json:"script"`
	Sudo                bool   `json:"sudo,omitempty"`
	RefreshCapabilities bool   `json:"refresh_capabilities,omitempty"`
	Name                string `json:"name,omitempty"`
}

// HibernateRequest sends a worker to sleep until UntilEpochS.
type HibernateRequest struct {
	UntilEpochS float64 `json:"until_epoch_s"`
}

// UpdateRequest asks a worker to replace its binary.
type UpdateRequest struct {
	Version string `json:"version"`
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
}

// CommandAccepted names a queued command.
type CommandAccepted struct {
	CommandID string `json:"command_id"`
	WorkerID  string `json:"worker_id"`
	// Version is the version an update was queued for (the server may
	// have picked the latest release); empty for other commands.
	Version string `json:"version,omitempty"`
}

// RunRequest queues a function invocation on a queue.
type RunRequest struct {
	Queue     string         `json:"queue"`
	Function  wire.Function  `json:"function"`
	RunConfig wire.RunConfig `json:"run_config"`
	ArgsBlob  []byte         `json:"args_blob,omitempty"`
	// RequiredTags must all be present on the worker ("k=v").
	RequiredTags []string `json:"required_tags,omitempty"`
	Script       *string  `json:"script,omitempty"`
	AsUser       *string  `json:"as_user,omitempty"`
	// PayloadRef holds the arguments instead of ArgsBlob when they are
	// over wire.PayloadInlineThreshold: a blob uploaded through
	// PathPresign. ArgsBlob must then be empty.
	PayloadRef *wire.PayloadRef `json:"payload_ref,omitempty"`
}

// Invocation is one queued, running or finished run.
type Invocation struct {
	ID       string `json:"id"`
	Queue    string `json:"queue"`
	Runner   string `json:"runner"`
	WorkerID string `json:"worker_id,omitempty"`
	// State is "queued", "running", "succeeded", "failed" or "killed".
	State      string          `json:"state"`
	ResultBlob []byte          `json:"result_blob,omitempty"`
	Error      *wire.ErrorInfo `json:"error,omitempty"`
	// StdoutTail is the last output (at most wire.StdoutTailMax bytes) its
	// daemon reported on a poll while it ran; kept after it ends until
	// serve restarts.
	StdoutTail     string  `json:"stdout_tail,omitempty"`
	CreatedEpochS  float64 `json:"created_epoch_s"`
	StartedEpochS  float64 `json:"started_epoch_s,omitempty"`
	FinishedEpochS float64 `json:"finished_epoch_s,omitempty"`
}

// KillRequest is the optional body of PathKill and PathKillExec: the
// reason the daemon reports the work cancelled with.
type KillRequest struct {
	Reason string `json:"reason,omitempty"`
}

// TokenRequest mints a join token. TTLS defaults to 15 minutes; Queue and
// Tags ("k=v") are given to the worker that joins with it, on every hello
// after, whatever the daemon's own configuration says.
type TokenRequest struct {
	TTLS  float64  `json:"ttl_s,omitempty"`
	Queue string   `json:"queue,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

// TokenCreated answers a minted token. Token ("<secret>.<CA fingerprint>")
// is shown this once: the control plane keeps only a hash of the secret.
// JoinCommand is the line to run on the host.
type TokenCreated struct {
	ID          string    `json:"id"`
	Token       string    `json:"token,omitempty"`
	ExpiresAt   time.Time `json:"expires_at"`
	JoinCommand string    `json:"join_command,omitempty"`
}

// Token states, as the token list shows them.
const (
	TokenUnused   = "unused"
	TokenRedeemed = "redeemed"
	TokenExpired  = "expired"
	TokenBurned   = "burned"
)

// Token is one minted join token, without its secret.
type Token struct {
	ID    string   `json:"id"`
	Queue string   `json:"queue,omitempty"`
	Tags  []string `json:"tags"`
	// State is TokenUnused, TokenRedeemed, TokenExpired or TokenBurned.
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// WorkerID is the worker that redeemed it.
	WorkerID string `json:"worker_id,omitempty"`
	// Failures counts failed redemptions; at MaxTokenFailures it burns.
	Failures int `json:"failures,omitempty"`
}

// KeyRevoked answers a revocation: the key ids no request may be signed
// by any more.
type KeyRevoked struct {
	WorkerID string   `json:"worker_id"`
	KeyIDs   []string `json:"key_ids"`
}

// WorkerForgotten answers DELETE PathWorker: the worker's record is gone,
// with CommandsDropped undelivered commands; ExecsEnded of its execs that
// had not finished were ended (exit code -1) so that no one waits on them.
// Its machine's next hello registers it afresh (a worker with an enrolled
// key joins again with a token).
type WorkerForgotten struct {
	WorkerID        string `json:"worker_id"`
	CommandsDropped int    `json:"commands_dropped"`
	ExecsEnded      int    `json:"execs_ended"`
}

// Error is the body of every operator API error.
type Error struct {
	Error string `json:"error"`
}
