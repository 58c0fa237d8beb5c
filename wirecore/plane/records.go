package plane

import (
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Worker states, as the operator API shows them.
const (
	WorkerActive      = "active"
	WorkerSettingUp   = "setting_up"
	WorkerHibernating = "hibernating"
	WorkerLost        = "lost"
)

// Exec states, as the operator API shows them.
const (
	ExecQueued    = "queued"
	ExecDelivered = "delivered"
	ExecFinished  = "finished"
)

// Invocation states. Running, succeeded, failed and killed are the wire's.
const (
	InvocationQueued    = "queued"
	InvocationRunning   = wire.StateRunning
	InvocationSucceeded = wire.StateSucceeded
	InvocationFailed    = wire.StateFailed
	InvocationKilled    = wire.StateKilled
)

// The records below are everything the plane's state is made of. A Store
// keeps each kind keyed by its ID (chunks by ExecID and Offset) and hands
// them back in a Snapshot after a restart. Every field is exported and
// JSON-tagged so a store may keep a record as one JSON document; the wire
// types embedded in them (Capabilities, Versions, Function, RunConfig,
// ErrorInfo, ExecResult) marshal with encoding/json as they are.

// WorkerRecord is one registered daemon (the Worker row).
type WorkerRecord struct {
	ID        string   `json:"id"`
	MachineID string   `json:"machine_id"`
	Label     string   `json:"label"`
	Tags      []string `json:"tags"`
	// Queues comes from the hello's lanes; empty means the default queue.
	Queues       []string          `json:"queues"`
	Capabilities wire.Capabilities `json:"capabilities"`
	Versions     wire.Versions     `json:"versions"`
	// PublicKey is the enrolled key (wire encoding), set with KeyID and
	// only by an enrolment or a rotation, never by a hello alone.
	PublicKey *string `json:"public_key,omitempty"`
	// KeyID names PublicKey (identity.KeyID); empty for a bearer worker.
	KeyID string `json:"key_id,omitempty"`
	// PrevKeyID and PrevPublicKey are the key the worker rotated from at
	// RotatedAt, still accepted for identity.Window after it so requests
	// signed across the switch are not lost.
	PrevKeyID     string    `json:"prev_key_id,omitempty"`
	PrevPublicKey string    `json:"prev_public_key,omitempty"`
	RotatedAt     time.Time `json:"rotated_at,omitzero"`
	// KeyRevoked says an operator revoked the worker's key: no request
	// may act for it until its machine joins again with a new token.
	KeyRevoked bool `json:"key_revoked,omitempty"`
	// RevokedKeyIDs are the keys revoked for this worker, refused with
	// key_revoked (the newest MaxRevokedKeys).
	RevokedKeyIDs []string `json:"revoked_key_ids,omitempty"`
	// TokenID is the join token the key was enrolled with; PinnedQueue
	// and PinnedTags are that token's, given to the worker on every
	// hello whatever its daemon says.
	TokenID     string   `json:"token_id,omitempty"`
	PinnedQueue string   `json:"pinned_queue,omitempty"`
	PinnedTags  []string `json:"pinned_tags,omitempty"`
	// State is WorkerActive, WorkerSettingUp, WorkerHibernating or WorkerLost.
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	// LastSeen is the last hello or poll. It is persisted when it moves by
	// more than a few seconds, not on every poll.
	LastSeen time.Time `json:"last_seen"`
	// HibernateUntil is set while State is WorkerHibernating, and kept
	// when a hibernating worker is marked lost: its silence counts from
	// there (silentSince).
	HibernateUntil time.Time `json:"hibernate_until,omitzero"`
	// TargetVersion is sent as target_nymph_version until the worker's
	// versions.daemon equals it.
	TargetVersion string `json:"target_version,omitempty"`
	// Cursor is the last command cursor handed to the worker (extension
	// wire.ExtCursor), monotonically increasing.
	Cursor uint64 `json:"cursor,omitempty"`
	// LiveConfig is the worker's live configuration (extension
	// wire.ExtConfig), by wire.LiveConfigKeys key, as the operator wrote
	// it; ConfigGen counts its changes.
	LiveConfig map[string]string `json:"live_config,omitempty"`
	ConfigGen  uint64            `json:"config_gen,omitempty"`
	// CapabilitiesGen is the generation of the last capability snapshot
	// taken from the worker's polls (extension wire.ExtConfig).
	CapabilitiesGen uint64 `json:"capabilities_gen,omitempty"`
	// Extensions are the nymph extensions agreed with the worker's daemon
	// at its last hello (wire.AgreedExtensions of what it announced).
	Extensions []string `json:"extensions,omitempty"`
	// Update is the last ota_update sent to the worker and what became of
	// it, as far as the plane can tell; nil when none was.
	Update *UpdateRecord `json:"update,omitempty"`
	// SetupsInFlight are setup commands delivered and not yet acked.
	SetupsInFlight []SetupInFlight `json:"setups_in_flight,omitempty"`
	// AwaitingCapabilities is true between a successful refresh setup and
	// the poll that carries updated_capabilities.
	AwaitingCapabilities bool `json:"awaiting_capabilities,omitempty"`
}

// Update states, as operator.Worker.Update shows them.
const (
	// UpdateQueued: the ota_update waits for the worker's next poll.
	UpdateQueued = "queued"
	// UpdateDelivered: a poll took it and the worker has not come back
	// with a hello since: still downloading, or refused it (a digest
	// mismatch, a download that failed: its daemon logs which) and runs on.
	UpdateDelivered = "delivered"
	// UpdateRolledBack: after the update the worker said hello again on
	// another version — the new binary was rolled back (or the daemon
	// restarted without installing it).
	UpdateRolledBack = "rolled_back"
	// UpdateDone: a hello reported the version sent.
	UpdateDone = "updated"
)

// UpdateRecord is an ota_update's progress on one worker.
type UpdateRecord struct {
	Version string `json:"version"`
	// From is the version the worker ran when it was sent the update.
	From  string    `json:"from,omitempty"`
	State string    `json:"state"`
	At    time.Time `json:"at"`
	// Running is the version of the hello that settled it.
	Running string `json:"running,omitempty"`
}

// TokenRecord is one join token. Only SecretHash (identity.SecretHash)
// of its secret is kept: a stolen store enrols nobody.
type TokenRecord struct {
	ID         string    `json:"id"`
	SecretHash string    `json:"secret_hash"`
	Queue      string    `json:"queue,omitempty"`
	Tags       []string  `json:"tags,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// RedeemedAt and WorkerID are set by the one hello that redeemed it.
	RedeemedAt time.Time `json:"redeemed_at,omitzero"`
	WorkerID   string    `json:"worker_id,omitempty"`
	// Failures counts hellos that named the token and failed; at
	// MaxTokenFailures it is burned (BurnedAt) and redeems nothing.
	Failures int       `json:"failures,omitempty"`
	BurnedAt time.Time `json:"burned_at,omitzero"`
}

// SetupInFlight is one delivered setup command waiting for its ack, which
// names invocation wire.SetupInvocationID(CommandID).
type SetupInFlight struct {
	CommandID string `json:"command_id"`
	Refresh   bool   `json:"refresh"`
}

// CommandRecord is one command queued for one worker and not yet
// delivered: the worker's control commands, its pending-setup FIFO and its
// execs. A delivered command is deleted (Batch.DeleteCommands). Runs are
// not commands until delivered: they wait as InvocationRecords on a queue.
type CommandRecord struct {
	ID       string `json:"id"`
	WorkerID string `json:"worker_id"`
	// Seq orders commands (and invocations) oldest first across restarts.
	Seq  uint64 `json:"seq"`
	Kind string `json:"kind"`
	// Body is the msgpack body sent on the wire as the command's body.
	Body      []byte    `json:"body"`
	CreatedAt time.Time `json:"created_at"`
	// ExecID is set for an exec command.
	ExecID string `json:"exec_id,omitempty"`
	// InvocationID is set for a run command. Run commands exist only
	// between delivery and the host's word that the reply went out, and
	// are in a Batch only while a cursor keeps them (wire.ExtCursor).
	InvocationID string `json:"invocation_id,omitempty"`
	// Refresh is a setup's refresh_capabilities.
	Refresh bool `json:"refresh,omitempty"`
	// Cursor is the number a poll reply gave the command (extension
	// wire.ExtCursor): set, the command was handed out and is kept until
	// its daemon's cursor reaches it; 0, it waits for delivery.
	Cursor uint64 `json:"cursor,omitempty"`
}

// InvocationRecord is one run, queued on a queue name until a poll whose
// worker fits takes it.
type InvocationRecord struct {
	ID                 string         `json:"id"`
	Seq                uint64         `json:"seq"`
	Queue              string         `json:"queue"`
	Function           wire.Function  `json:"function"`
	RunConfig          wire.RunConfig `json:"run_config"`
	ArgsBlob           []byte         `json:"args_blob,omitempty"`
	RequiredTags       []string       `json:"required_tags,omitempty"`
	Script             *string        `json:"script,omitempty"`
	AsUser             *string        `json:"as_user,omitempty"`
	ParentInvocationID *string        `json:"parent_invocation_id,omitempty"`
	RootInvocationID   *string        `json:"root_invocation_id,omitempty"`
	// PayloadRef holds the arguments instead of ArgsBlob (over the inline
	// threshold).
	PayloadRef *wire.PayloadRef `json:"payload_ref,omitempty"`
	// State is one of the Invocation* constants.
	State      string          `json:"state"`
	WorkerID   string          `json:"worker_id,omitempty"`
	CommandID  string          `json:"command_id,omitempty"`
	ResultBlob []byte          `json:"result_blob,omitempty"`
	Error      *wire.ErrorInfo `json:"error,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  time.Time       `json:"started_at,omitzero"`
	FinishedAt time.Time       `json:"finished_at,omitzero"`
}

// ExecRecord is one exec: queued → delivered → finished. The exec_id in
// the result and chunk URLs is its only credential, so it is long and
// random.
type ExecRecord struct {
	ExecID    string `json:"exec_id"`
	CommandID string `json:"command_id"`
	WorkerID  string `json:"worker_id"`
	// State is ExecQueued, ExecDelivered or ExecFinished.
	State string `json:"state"`
	// Stream is true when the exec was sent with a LogSink.
	Stream bool `json:"stream,omitempty"`
	// Result is the first result posted; later ones are ignored.
	Result *wire.ExecResult `json:"result,omitempty"`
	// LogSize is the number of log bytes stored so far: the offset the
	// next chunk gets.
	LogSize     int64     `json:"log_size"`
	CreatedAt   time.Time `json:"created_at"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	FinishedAt  time.Time `json:"finished_at,omitzero"`
}

// ChunkRecord is one streamed log chunk of an exec. Offsets of one exec are
// contiguous: each chunk starts where the previous one ended.
type ChunkRecord struct {
	ExecID string `json:"exec_id"`
	Offset int64  `json:"offset"`
	// Data aliases the request body: the host keeps it alive until Apply
	// returned.
	Data []byte    `json:"data"`
	At   time.Time `json:"at"`
}

// Batch is the set of record mutations of one Step. The host applies it
// atomically and durably before it sends any reply of that Step. Apply
// order: upserts (Workers, Commands, Invocations, Execs, Chunks, Tokens) then
// DeleteCommands — a command may be created and delivered in one Step.
type Batch struct {
	Workers        []WorkerRecord     `json:"workers,omitempty"`
	Commands       []CommandRecord    `json:"commands,omitempty"`
	DeleteCommands []string           `json:"delete_commands,omitempty"`
	Invocations    []InvocationRecord `json:"invocations,omitempty"`
	Execs          []ExecRecord       `json:"execs,omitempty"`
	// Chunks are appended; (ExecID, Offset) never repeats.
	Chunks []ChunkRecord `json:"chunks,omitempty"`
	// DeleteInvocations and DeleteExecs (with their chunks) are finished
	// records past Config.Retain; like DeleteCommands they apply after
	// the upserts.
	DeleteInvocations []string `json:"delete_invocations,omitempty"`
	DeleteExecs       []string `json:"delete_execs,omitempty"`
	// DeleteWorkers are workers an operator (or Config.ForgetLostAfter)
	// forgot; their commands are in DeleteCommands of the same batch.
	// They apply after the upserts too.
	DeleteWorkers []string `json:"delete_workers,omitempty"`
	// Tokens are upserts of join tokens: a redemption is in the same
	// batch as the worker whose key it enrolled, so of two hellos racing
	// on one token exactly one is stored as its redeemer.
	Tokens []TokenRecord `json:"tokens,omitempty"`
}

// Empty reports whether the batch changes nothing.
func (b *Batch) Empty() bool {
	return len(b.Workers) == 0 && len(b.Commands) == 0 && len(b.DeleteCommands) == 0 &&
		len(b.Invocations) == 0 && len(b.Execs) == 0 && len(b.Chunks) == 0 &&
		len(b.DeleteInvocations) == 0 && len(b.DeleteExecs) == 0 && len(b.DeleteWorkers) == 0 && len(b.Tokens) == 0
}

// Snapshot is every stored record except chunk bytes: what Restore needs
// to rebuild the plane after a restart. Order within each slice does not
// matter.
type Snapshot struct {
	Workers     []WorkerRecord     `json:"workers"`
	Commands    []CommandRecord    `json:"commands"`
	Invocations []InvocationRecord `json:"invocations"`
	Execs       []ExecRecord       `json:"execs"`
	Tokens      []TokenRecord      `json:"tokens"`
}
