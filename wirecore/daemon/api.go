package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Defaults for the configuration keys whose zero value means something else
// (or nothing). The config loader applies them; New only fills WaitMaxS,
// RetryMinS and RetryMaxS when they are not positive, because zero is a
// meaningful value for MaxInvocations (unbounded), KeepAliveS (exit when
// idle) and GraceS (no grace).
const (
	DefaultQueue          = "default"
	DefaultWaitMaxS       = 20.0
	DefaultRetryMinS      = 1.0
	DefaultRetryMaxS      = 60.0
	DefaultMaxInvocations = 100
	DefaultKeepAliveS     = -1.0
	DefaultGraceS         = 60.0
	DefaultRunner         = wire.RunnerProcess
)

// The runner kinds are wire's (wire.RunnerProcess, …, wire.RunnerKind). A
// run names one in run_config.runner (or gets Config.DefaultRunner); a name
// that is no kind fails the run with "unknown runner kind: {name}"; a kind
// that Config.Runners does not offer fails it with {type:
// "RunnerUnavailable"}; StartRun carries the kind, an alias resolved
// ("subprocess" arrives as "process").

// Run states reported by ReportState and Status.State.
const (
	StateBooting     = "booting"     // before Boot
	StateHello       = "hello"       // a hello is in flight
	StatePolling     = "polling"     // the poll loop runs (a poll may be parked or held back by the semaphore)
	StateBackoff     = "backoff"     // waiting out a backoff before the next hello or poll
	StateHibernating = "hibernating" // sleeping until a hibernate deadline
	StateDraining    = "draining"    // a signal or the idle policy stopped polling; in-flight work finishes
	StateUpdating    = "updating"    // an update is downloaded: polling stopped until in-flight work finishes, then it is installed
	StateExiting     = "exiting"     // Exit was emitted
)

// ShutdownMessage is the error message of work that the daemon answers
// without running because it is shutting down: a command that arrived on a
// poll that raced the first signal.
const ShutdownMessage = "daemon shutting down"

// Config is everything the machine needs from udf-daemon.toml, flags and
// host detection. Values are taken as given (see the Default* constants).
type Config struct {
	// MachineID is [daemon] machine_id; "auto" or "" means Hostname.
	MachineID string
	Hostname  string
	Label     string
	// Tags are "key=value" strings, config tags already merged with
	// detected ones.
	Tags  []string
	Lanes []string
	// Runners are the runner kinds this host offers (capabilities.runners),
	// configured ones first, detected ones appended.
	Runners []string
	// Workdir is [runtime] workdir, the root of per-invocation workdirs.
	Workdir   string
	Versions  wire.Versions
	PublicKey *string
	// DaemonVersion is the running binary's version; an ota_update to this
	// same version is a no-op.
	DaemonVersion string
	// DefaultRunner is [runtime] default_runner.
	DefaultRunner string
	// Extensions are the nymph extensions this daemon announces in its
	// hello (wire.KnownExtensions, or fewer); it uses one only when the
	// plane's hello reply agreed to it. Empty: a plain protocol "1" hello.
	Extensions []string
	// LogLevel is [log] level, the level a plane's live configuration
	// (extension wire.ExtConfig) returns to when it stops setting one.
	LogLevel wire.LogLevel
	// Cursor and Applied are what PersistDelivery last wrote (extension
	// wire.ExtCursor): the last command cursor applied and the ids of the
	// commands applied most recently (at most MaxApplied), so a daemon
	// that restarts neither loses nor repeats a command.
	Cursor  uint64
	Applied []string

	Queue     string
	WaitMaxS  float64 // [poll] wait_max_s, sent as timeout_s
	RetryMinS float64 // [poll] retry_min_s
	RetryMaxS float64 // [poll] retry_max_s, the cap on the backoff base
	// MaxInvocations is [runtime] max_invocations; 0 means unbounded.
	MaxInvocations int
	// KeepAliveS is [runtime] keep_alive_s: -1 never idle-exits, 0 exits as
	// soon as the idle clock starts, N exits after N idle seconds.
	KeepAliveS float64
	GraceS     float64 // [shutdown] grace_s

	// KeepPollOnWake keeps the parked poll in flight when an exec or a
	// setup finishes, instead of cancelling it and sending a fresh one.
	// The driver sets it for carriers that cannot withdraw a request in
	// flight — the transport's CanWithdraw (hostio/transport) is false
	// for the fifo and spool relays: the relay has already forwarded the
	// old poll, its reply comes back through the
	// pipe after the daemon moved on to a newer request id and is
	// discarded as stale, so the commands the control plane handed out in
	// it would be lost (and a relay pump carries one request at a time
	// per pipe, so the fresh poll could not overtake anyway).
	//
	// With it, the loop waits for the parked poll's reply — a control
	// plane answers it at once when it gets the exec result or ack — and
	// polls again right after it. A setup with refresh_capabilities then
	// acks only once detection is back, so the poll after that prompt
	// reply carries updated_capabilities. A drain does not cancel the
	// parked poll either: the daemon waits for its reply (within grace_s,
	// whose timer is armed for it) and answers its commands without
	// running them, as for any reply that raced the signal (exec exit -1,
	// run and setup acked killed, "daemon shutting down"); the grace
	// expiring or a second signal withdraws the poll. A control plane that
	// leaves the poll parked until its deadline costs up to wait_max_s of
	// latency per completion, never a command. False (direct HTTP) keeps
	// the internal wake signal: cancel the parked poll, poll again at once.
	KeepPollOnWake bool
}

// DefaultConfig returns a Config with every default applied; the caller
// fills identity, host and version fields.
func DefaultConfig() Config {
	return Config{
		Queue:          DefaultQueue,
		WaitMaxS:       DefaultWaitMaxS,
		RetryMinS:      DefaultRetryMinS,
		RetryMaxS:      DefaultRetryMaxS,
		MaxInvocations: DefaultMaxInvocations,
		KeepAliveS:     DefaultKeepAliveS,
		GraceS:         DefaultGraceS,
		DefaultRunner:  DefaultRunner,
		Runners:        []string{wire.RunnerProcess},
	}
}

// Rand is the machine's only source of randomness. *math/rand/v2.Rand
// satisfies it; tests pass a seeded one.
type Rand interface {
	// Float64 returns a value in [0, 1): the backoff jitter.
	Float64() float64
	// Uint64 supplies the random part of the provisional worker id's ULID.
	Uint64() uint64
}

// TimerID names one of the machine's timers. The driver keeps at most one
// timer per id: SetTimer replaces an armed timer of the same id.
type TimerID string

// The machine's timers.
const (
	TimerBackoff   TimerID = "backoff"   // the wait after a failed hello or poll
	TimerIdle      TimerID = "idle"      // keep_alive_s of continuous idleness
	TimerGrace     TimerID = "grace"     // [shutdown] grace_s after the first signal
	TimerHibernate TimerID = "hibernate" // a hibernate's until_epoch_s
	TimerRepost    TimerID = "repost"    // the earliest failed post to send again
)

// Timers lists every timer the machine sets, each at most once armed: a
// driver may keep one slot per entry.
var Timers = [...]TimerID{TimerBackoff, TimerIdle, TimerGrace, TimerHibernate, TimerRepost}

// TimerIndex is id's slot in Timers. A timer not listed there is a bug
// in the list, not something a driver could drop, so it panics.
func TimerIndex(id TimerID) int {
	for i, t := range Timers {
		if t == id {
			return i
		}
	}
	panic(fmt.Sprintf("daemon: timer %q is not in Timers", id))
}

// SignalKind is the signal the driver received.
type SignalKind string

// The two signals that start a drain.
const (
	SignalTerm SignalKind = "term"
	SignalInt  SignalKind = "int"
)

// ---------------------------------------------------------------- events

// Event is something that happened, fed to Machine.Step. The set is closed:
// only the types in this file implement it.
type Event interface{ isEvent() }

// Boot starts the machine. It must be the first event.
type Boot struct{}

// HelloResult answers SendHello.
//
// The driver sets Err when no response arrived (transport failure, relay
// error with status 0) or when a 2xx body did not decode; otherwise Status
// is the HTTP status, Response the decoded body when Status is 2xx, and
// Body the raw body when it is not (a 422 carries {error, field}, msgpack
// or JSON).
type HelloResult struct {
	Status   int
	Response *wire.HelloResponse
	Body     []byte
	Err      error
	// RetryAfter is the answer's Retry-After (429, 503), 0 when none: the
	// next attempt waits at least that long (at most MaxRetryAfter).
	RetryAfter time.Duration
}

// MaxRetryAfter bounds how long a Retry-After may hold the daemon back.
const MaxRetryAfter = time.Hour

// PollResult answers SendPoll with the same Seq. The driver feeds back
// exactly one PollResult per SendPoll, also for a poll it cancelled
// (Err = the cancellation) — and when the response arrived before the
// cancellation took hold, it delivers that response: the control plane has
// already handed those commands out, and the machine still runs them.
// Fields as in HelloResult; a 404 whose body is {error: "unknown_worker"}
// makes the machine say hello again.
type PollResult struct {
	Seq        uint64
	Status     int
	Response   *wire.PollResponse
	Body       []byte
	Err        error
	RetryAfter time.Duration
}

// ExecFinished reports that a started exec ended, whatever the way (exit,
// timeout -2, spawn failure or cancellation -1). Result is posted as is.
type ExecFinished struct {
	ExecID string
	Result wire.ExecResult
}

// RunFinished reports a started run's terminal outcome (runners.Outcome).
type RunFinished struct {
	InvocationID string
	State        string // wire.StateSucceeded, StateFailed or StateKilled
	ResultBlob   []byte
	Error        *wire.ErrorInfo
}

// SetupFinished reports that a setup script ended. ExitCode is the
// script's exit status; Killed is set when CancelInFlight stopped it; Err
// is set when the script could not be run at all.
type SetupFinished struct {
	CommandID string
	ExitCode  int
	Killed    bool
	// Signal, when set, says how a script that ran ended without an exit
	// status ("signal: killed"): a ScriptFailed, as a run's script is.
	Signal string
	Err    error
}

// CapabilitiesRefreshed answers RefreshCapabilities with the new snapshot
// (Err set, Capabilities ignored, when detection failed).
type CapabilitiesRefreshed struct {
	CommandID    string
	Capabilities wire.Capabilities
	Err          error
}

// TimerFired reports that the timer armed by SetTimer{ID, At} fired. At is
// echoed from SetTimer so a fire that raced a re-arm is recognised as stale
// and ignored.
type TimerFired struct {
	ID TimerID
	At time.Time
}

// Signal reports SIGTERM or SIGINT. The first starts a drain, the second
// cancels in-flight work at once, the third exits immediately.
type Signal struct{ Kind SignalKind }

// AckPosted answers PostAck: the ack reached the control plane, or Err
// says why not, and Status is the control plane's answer (0 when none
// came, StatusUnsent when the driver could not send it). A failure that
// may pass (no answer, 408, 429, 5xx) is sent again on the post's budget
// (PostAttempts); any other is logged and dropped.
type AckPosted struct {
	InvocationID string
	Status       int
	Err          error
}

// KeyRevoked reports that the control plane refused a request because the
// key that signed it is revoked (wire.ErrKeyRevoked). Nothing this daemon
// signs is accepted again, so it cancels its work and exits with status
// 2, saying so: the host must join anew.
type KeyRevoked struct {
	Message string
}

// OTAFetched reports a StartOTA's download: Err is nil when the binary is
// verified and kept aside, ready for ApplyOTA.
type OTAFetched struct {
	CommandID string
	Version   string
	Err       error
}

// OTAApplied reports an ApplyOTA that did not replace the process.
type OTAApplied struct {
	CommandID string
	Err       error
}

// StatusUnsent is the Status of a post the driver could not make at all
// (it could not encode the body): sending it again would fail the same way.
const StatusUnsent = -1

// ResultPosted answers PostExecResult, as AckPosted does for acks.
type ResultPosted struct {
	ExecID string
	Status int
	Err    error
}

func (Boot) isEvent()                  {}
func (HelloResult) isEvent()           {}
func (PollResult) isEvent()            {}
func (ExecFinished) isEvent()          {}
func (RunFinished) isEvent()           {}
func (SetupFinished) isEvent()         {}
func (CapabilitiesRefreshed) isEvent() {}
func (TimerFired) isEvent()            {}
func (Signal) isEvent()                {}
func (AckPosted) isEvent()             {}
func (ResultPosted) isEvent()          {}
func (KeyRevoked) isEvent()            {}
func (OTAFetched) isEvent()            {}
func (DrainNoticed) isEvent()          {}
func (OTAApplied) isEvent()            {}

// ---------------------------------------------------------------- effects

// Effect is something the driver must do, returned by Machine.Step. The set
// is closed: only the types in this file implement it. Effects of one Step
// are carried out in order; most start asynchronous work whose end the
// driver feeds back as the event named on each type.
type Effect interface{ isEffect() }

// SendHello: POST Request to /v1/daemon/hello. Feed back HelloResult.
type SendHello struct {
	Request wire.HelloRequest
}

// SendPoll: POST Request to /v1/daemon/poll on the poll lane. At most one
// poll is meant to be parked: the machine cancels the previous one with
// CancelPoll before it sends another. Feed back PollResult{Seq}.
type SendPoll struct {
	Seq     uint64
	Request wire.PollRequest
}

// CancelPoll: the machine stops waiting on the poll with this Seq; its
// PollResult is still fed back (see PollResult). Without KeepReply the
// driver cuts the request off. With KeepReply (a wake replacing the poll
// with a fresh one) it lets the request finish: the control plane may
// already have handed that poll commands, and an HTTP request cut off after
// its reply was written loses them. The plane answers an overtaken poll
// at once, so the request does not linger.
type CancelPoll struct {
	Seq       uint64
	KeepReply bool
}

// StartExec: run the exec (bash -c, timeout, truncation, streaming to
// Exec.Log when set). Feed back ExecFinished{Exec.ExecID}.
type StartExec struct {
	CommandID string
	Exec      wire.Exec
}

// StartRun: hand Run to the runner of Kind (already resolved: "subprocess"
// arrives as "process"). Feed back RunFinished{Run.InvocationID}.
type StartRun struct {
	CommandID string
	Kind      string
	Run       wire.Run
}

// StartSetup: run Run (a synthetic invocation: function.module "_setup",
// qualname the setup's name or "setup", script the setup's script, as_user
// "root" under sudo) with the process runner in Workdir
// ({workdir}/_setup-{command id}). Feed back SetupFinished{CommandID}.
type StartSetup struct {
	CommandID string
	Run       wire.Run
	Workdir   string
}

// CancelInFlight: the shutdown grace expired (or a second signal came).
// Cancel every exec, run and setup still running; each still reports its
// end (exec exit_code -1, run killed, setup Killed).
type CancelInFlight struct{}

// PostExecResult: POST Result to /v1/daemon/exec/{ExecID}/result. Feed back
// ResultPosted{ExecID, Status, Err}. A failed post may be emitted again.
type PostExecResult struct {
	ExecID string
	Result wire.ExecResult
}

// PostAck: POST Ack to /v1/daemon/ack. Feed back AckPosted{InvocationID,
// Status, Err}. A failed post may be emitted again.
type PostAck struct {
	Ack wire.Ack
}

// SetTimer: arm timer ID to fire at At (replacing an armed timer of the
// same ID). Feed back TimerFired{ID, At} when it fires.
type SetTimer struct {
	ID TimerID
	At time.Time
}

// CancelTimer: disarm timer ID if armed. Nothing is fed back.
type CancelTimer struct {
	ID TimerID
}

// ReportState: the run-state changed (one of the State* constants); the
// driver shows it in logs and introspection. Nothing is fed back.
type ReportState struct {
	State string
}

// Log: write a log record (commands skipped, acks that failed, …).
// Nothing is fed back.
type Log struct {
	Level slog.Level
	Msg   string
	Attrs []slog.Attr
}

// RefreshCapabilities: re-run host detection after a setup with
// refresh_capabilities exited 0. Feed back CapabilitiesRefreshed{CommandID}.
type RefreshCapabilities struct {
	CommandID string
}

// StartOTA: download and verify Update (it has already passed wire.CheckOTA),
// keeping the verified binary aside, and feed back OTAFetched. The daemon
// keeps working meanwhile. A driver without OTA support logs and ignores
// it (nothing is fed back).
type StartOTA struct {
	CommandID string
	Update    wire.OTAUpdate
}

// SetLogLevel: log from now on at Level, as the plane's live
// configuration says (extension wire.ExtConfig).
type SetLogLevel struct {
	Level wire.LogLevel
}

// MaxApplied bounds the applied command ids the machine keeps: far more
// than one poll reply can hand out again.
const MaxApplied = 4096

// PersistDelivery: keep Cursor and Applied (extension wire.ExtCursor) so
// a restarted daemon starts from them (Config.Cursor, Config.Applied).
// Nothing is fed back; a write that fails only weakens that promise.
type PersistDelivery struct {
	Cursor  uint64
	Applied []string
}

// CancelWork: stop the one exec (ExecID) or run (InvocationID) a cancel
// command named, as CancelInFlight stops all of them; its end is fed
// back as usual, and the machine reports it killed with the reason.
type CancelWork struct {
	ExecID, InvocationID string
}

// NotifyDraining: send Request (a poll with Draining set and a zero
// timeout) on the control lane, and feed back DrainNoticed once it is
// answered or has failed (its answer carries nothing). The plane answers
// the parked poll at once (extension wire.ExtDrain). The machine does not
// exit before DrainNoticed, so no answer is left unread (a spool's reply
// file, a relay pipe's frame).
type NotifyDraining struct {
	Request wire.PollRequest
}

// DrainNoticed reports that a NotifyDraining's request has ended.
type DrainNoticed struct{}

// ApplyOTA: install the binary OTAFetched reported and exec it. The
// machine emits it once the update's drain is done: nothing runs, every
// outcome is posted. On success the process is replaced; on failure feed
// back OTAApplied with the error, and the machine polls again.
type ApplyOTA struct {
	CommandID string
	Version   string
}

// DiscardOTA: remove the binary OTAFetched reported without installing it
// (the daemon began to drain for another reason, or another update came).
type DiscardOTA struct {
	CommandID string
}

// RotateKey: generate a new keypair and call /v1/daemon/keys. A driver
// without an identity logs and ignores it. Nothing is fed back.
type RotateKey struct {
	CommandID string
}

// Exit: stop the process with Code after printing Reason (to stderr for a
// non-zero code). The driver cancels whatever is still outstanding. No
// further event is accepted.
type Exit struct {
	Code   int
	Reason string
}

func (SendHello) isEffect()           {}
func (SendPoll) isEffect()            {}
func (CancelPoll) isEffect()          {}
func (StartExec) isEffect()           {}
func (StartRun) isEffect()            {}
func (StartSetup) isEffect()          {}
func (CancelInFlight) isEffect()      {}
func (PostExecResult) isEffect()      {}
func (PostAck) isEffect()             {}
func (SetTimer) isEffect()            {}
func (CancelTimer) isEffect()         {}
func (ReportState) isEffect()         {}
func (Log) isEffect()                 {}
func (RefreshCapabilities) isEffect() {}
func (StartOTA) isEffect()            {}
func (ApplyOTA) isEffect()            {}
func (CancelWork) isEffect()          {}
func (PersistDelivery) isEffect()     {}
func (SetLogLevel) isEffect()         {}
func (NotifyDraining) isEffect()      {}
func (DiscardOTA) isEffect()          {}
func (RotateKey) isEffect()           {}
func (Exit) isEffect()                {}

// ---------------------------------------------------------------- status

// Status is a read-only snapshot for the introspection server and metrics.
// Machine is not safe for concurrent use: the driver takes a Status after
// each Step and publishes the copy.
type Status struct {
	State    string
	WorkerID string
	Queue    string

	ExecsRunning int
	RunsRunning  int
	// Held counts execs and runs received but waiting for a permit.
	Held          int
	SetupsQueued  int
	SetupRunning  bool
	PostsPending  int
	PermitsFree   int // -1 when max_invocations is 0 (unbounded)
	BackoffBaseS  float64
	LastPollAt    time.Time // when the last poll was sent
	LastPollOKAt  time.Time // when the last poll succeeded
	Counters      Counters
	HibernateTill time.Time
}

// Counters only ever grow; /metrics exports them.
type Counters struct {
	Hellos, HelloErrors uint64 // hellos sent; hellos that failed (then retried)
	Polls, PollErrors   uint64 // polls sent; polls that failed (then backed off)
	Commands, Skipped   uint64 // commands received; skipped or discarded
	ExecsStarted        uint64
	RunsStarted         uint64
	RunsDone            uint64
	Setups              uint64 // setups finished
	// Exec outcomes by exit code: 0, other non-negative, -2 (timeout),
	// -1 (spawn failure, wait error or cancellation).
	ExecsOK, ExecsNonZero, ExecsTimedOut, ExecsFailed uint64
	AcksFailed, ResultsFailed                         uint64 // posts that did not arrive
}
