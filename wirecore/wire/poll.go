package wire

import (
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"
)

// Arrays and maps announced longer than this are refused before anything is
// allocated for them (a count is 4 bytes; its elements would be far more).
//msgp:limit arrays:65536 maps:65536

// Invocation states as they appear in InvocationStatus and Ack.
const (
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateKilled    = "killed"
)

// PollRequest is the body of POST /v1/daemon/poll.
type PollRequest struct {
	WorkerID string `msg:"worker_id"`
	// Queue passes a trailing "*" through: the control plane reads it as a prefix.
	Queue    string `msg:"queue"`
	TimeoutS Float  `msg:"timeout_s"`
	// Cursor is null in protocol "1". With extension ExtCursor agreed it
	// is the last command cursor the daemon applied (FormatCursor).
	Cursor              *string            `msg:"cursor"`
	Invocations         []InvocationStatus `msg:"invocations"`
	UpdatedCapabilities *Capabilities      `msg:"updated_capabilities,omitempty"`
	// Draining (extension ExtDrain, sent only when the plane agreed to it)
	// says the daemon has stopped taking work: the plane answers its
	// parked poll at once and this one with no commands.
	Draining bool `msg:"nymph_draining,omitempty"`
	// Full (extension ExtCancel) says every permit is taken: the plane
	// parks the poll as usual but hands it control commands only (a
	// cancel above all), never an exec, a run or a setup. Without the
	// extension a full daemon does not poll at all.
	Full bool `msg:"nymph_full,omitempty"`
	// CapabilitiesGen (extension ExtConfig) numbers UpdatedCapabilities:
	// the daemon's refreshes count up, and the plane ignores a snapshot
	// older than one it took.
	CapabilitiesGen uint64 `msg:"nymph_capabilities_gen,omitempty"`
}

// InvocationStatus reports one locally tracked run: state "running" with
// a null exit code. StdoutTail is the last bytes (at most StdoutTailMax)
// of the run's output so far; the protocol's first daemon always sent it
// empty.
type InvocationStatus struct {
	InvocationID string    `msg:"invocation_id"`
	State        string    `msg:"state"`
	StartedAt    Timestamp `msg:"started_at"`
	ExitCode     *Int      `msg:"exit_code"`
	StdoutTail   string    `msg:"stdout_tail"`
}

// StdoutTailMax bounds InvocationStatus.StdoutTail: the last 4 KiB of a
// run's output. A plane keeps no more of one than that.
const StdoutTailMax = 4 << 10

// StdoutTailOf is the end of s that fits a stdout_tail: at most
// StdoutTailMax bytes, cut at a rune boundary (a rune whose leading bytes
// would be cut off is left out).
func StdoutTailOf(s string) string {
	if len(s) <= StdoutTailMax {
		return s
	}
	s = s[len(s)-StdoutTailMax:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// PollResponse carries the commands for this daemon, run in array order.
type PollResponse struct {
	Commands           []Command `msg:"commands,allownil"`
	TargetNymphVersion *string   `msg:"target_nymph_version"`
	// Cursor (extension ExtCursor) numbers the last command of this
	// reply; absent when the reply has none or the extension is off.
	Cursor *string `msg:"nymph_cursor,omitempty"`
	// Config (extension ExtConfig) is the worker's live configuration
	// when it changed since the plane last sent it: every key, as in the
	// hello reply's config map.
	Config map[string]msgp.Raw `msg:"nymph_config,omitempty"`
}

// Command is one poll command; Body stays raw until Dispatch decodes it by Kind.
type Command struct {
	ID   string   `msg:"id"`
	Kind string   `msg:"kind"`
	Body msgp.Raw `msg:"body"`
}
