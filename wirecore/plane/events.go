package plane

import (
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// RequestID names one request the host is waiting to answer. The host picks
// it (any value unique among its outstanding requests); every Reply and
// Park effect names the request it is for.
type RequestID uint64

// Event is one input to Step: something that happened, without the time
// it happened at (Step takes that). The set is closed: only the types in
// this file implement it.
type Event interface{ isEvent() }

// Request is an Event a client waits on: a daemon route or an operator
// route. Its Req is the host's name for it; Named sets that name, so a
// host can build the event where the request is read and name it where
// it steps it.
type Request interface {
	Event
	Named(id RequestID) Request
}

// Hello is POST /v1/daemon/hello. Missing is the dotted path of the first
// required key absent from the raw body (MissingHelloField), "" when all
// are present.
type Hello struct {
	Req     RequestID
	Body    wire.HelloRequest
	Missing string
	Auth    Auth
}

// Poll is POST /v1/daemon/poll.
type Poll struct {
	Req  RequestID
	Body wire.PollRequest
	Auth Auth
}

// PollDeadline fires when a parked poll or log wait reaches the Until of
// its Park effect. A deadline for a request already answered is ignored.
type PollDeadline struct {
	Req RequestID
}

// Gone says the client of a parked request went away: forget it.
type Gone struct {
	Req RequestID
}

// Undelivered says the reply to poll Req never reached its daemon: the
// client had gone before the host could write it (the daemon abandons a
// parked poll whenever a local exec or setup ends). The commands of that
// reply go back to the front of the worker's queue.
type Undelivered struct {
	Req RequestID
}

// Ack is POST /v1/daemon/ack.
type Ack struct {
	Req  RequestID
	Body wire.Ack
	Auth Auth
}

// ExecResult is POST /v1/daemon/exec/{exec_id}/result.
type ExecResult struct {
	Req    RequestID
	ExecID string
	Body   wire.ExecResult
	Auth   Auth
}

// Chunk is POST /v1/daemon/exec/{exec_id}/chunk: raw log bytes. Data is
// referenced by the Batch until the host applied it.
type Chunk struct {
	Req    RequestID
	ExecID string
	Data   []byte
	Auth   Auth
}

// Keys is POST /v1/daemon/keys: a key rotation, signed by the outgoing
// key, the new key's proof in Auth.NewKeySig.
type Keys struct {
	Req  RequestID
	Body wire.KeyRotationRequest
	Auth Auth
}

// Authenticate is a daemon request the plane only authenticates, as it
// does any daemon request, and answers OK when its credentials pass: a
// post to /v1/daemon/event or /v1/daemon/result-chunk (served, never
// posted by nymph, recorded by nothing), and a presign before the host
// serves it.
type Authenticate struct {
	Req  RequestID
	Auth Auth
}

// Tick is a clock tick: the plane marks lost workers and expires parked
// requests whose deadline passed. A host ticks about once a second.
type Tick struct{}

// Operator requests (the admin API of wirecore/operator).

// ListWorkers is GET operator.PathWorkers.
type ListWorkers struct {
	Req RequestID
}

// GetWorker is GET operator.PathWorker.
type GetWorker struct {
	Req      RequestID
	WorkerID string
}

// EnqueueExec is POST operator.PathExec.
type EnqueueExec struct {
	Req      RequestID
	WorkerID string
	Body     operator.ExecRequest
}

// EnqueueSetup is POST operator.PathSetup.
type EnqueueSetup struct {
	Req      RequestID
	WorkerID string
	Body     operator.SetupRequest
}

// EnqueueHibernate is POST operator.PathHibernate.
type EnqueueHibernate struct {
	Req      RequestID
	WorkerID string
	Body     operator.HibernateRequest
}

// EnqueueReset is POST operator.PathReset (a reset_backoff command).
type EnqueueReset struct {
	Req      RequestID
	WorkerID string
}

// EnqueueUpdate is POST operator.PathUpdate: an ota_update command, and
// target_nymph_version on the worker's polls until it reports the version.
type EnqueueUpdate struct {
	Req      RequestID
	WorkerID string
	Body     operator.UpdateRequest
}

// EnqueueRotateKey is POST operator.PathRotateKey.
type EnqueueRotateKey struct {
	Req      RequestID
	WorkerID string
}

// CreateToken is POST operator.PathTokens: the host drew the secret and
// hands over only its identity.SecretHash. TTL zero is DefaultTokenTTL.
type CreateToken struct {
	Req        RequestID
	SecretHash string
	TTL        time.Duration
	Queue      string
	Tags       []string
}

// ListTokens is GET operator.PathTokens.
type ListTokens struct {
	Req RequestID
}

// RevokeKey is POST operator.PathRevokeKey.
type RevokeKey struct {
	Req      RequestID
	WorkerID string
}

// ForgetWorker is DELETE operator.PathWorker: a lost worker's record
// and its undelivered commands go (ForgetWorker answers
// operator.WorkerForgotten); an active one is refused 409.
type ForgetWorker struct {
	Req      RequestID
	WorkerID string
}

// GetExec is GET operator.PathExecStatus.
type GetExec struct {
	Req    RequestID
	ExecID string
}

// WaitLogs is GET operator.PathExecLogs: answered at once when bytes past
// Offset exist or the exec finished, else parked for up to WaitS seconds.
type WaitLogs struct {
	Req    RequestID
	ExecID string
	Offset int64
	WaitS  float64
}

// ListInvocations is GET operator.PathInvocations.
type ListInvocations struct {
	Req RequestID
}

// GetInvocation is GET operator.PathInvocation.
type GetInvocation struct {
	Req          RequestID
	InvocationID string
}

// EnqueueRun is POST operator.PathInvocations.
type EnqueueRun struct {
	Req  RequestID
	Body operator.RunRequest
}

// Kill is POST operator.PathKill: a queued invocation becomes killed; a
// running one is sent a cancel when its daemon speaks wire.ExtCancel, and
// answers 409 otherwise (protocol "1" has no cancel command).
type Kill struct {
	Req          RequestID
	InvocationID string
	// Reason goes to the daemon in the cancel of a running invocation.
	Reason string
}

// SetConfig is POST operator.PathConfig: keys of the worker's live
// configuration set (a value of "" removes the key).
type SetConfig struct {
	Req      RequestID
	WorkerID string
	Set      map[string]string
}

// KillExec stops an exec: a queued one is withdrawn, a delivered one is
// cancelled on a daemon that speaks wire.ExtCancel.
type KillExec struct {
	Req    RequestID
	ExecID string
	Reason string
}

func (KillExec) isEvent()         {}
func (SetConfig) isEvent()        {}
func (Hello) isEvent()            {}
func (Poll) isEvent()             {}
func (PollDeadline) isEvent()     {}
func (Gone) isEvent()             {}
func (Undelivered) isEvent()      {}
func (Ack) isEvent()              {}
func (ExecResult) isEvent()       {}
func (Chunk) isEvent()            {}
func (Tick) isEvent()             {}
func (ListWorkers) isEvent()      {}
func (GetWorker) isEvent()        {}
func (EnqueueExec) isEvent()      {}
func (EnqueueSetup) isEvent()     {}
func (EnqueueHibernate) isEvent() {}
func (EnqueueReset) isEvent()     {}
func (EnqueueUpdate) isEvent()    {}
func (EnqueueRotateKey) isEvent() {}
func (GetExec) isEvent()          {}
func (WaitLogs) isEvent()         {}
func (ListInvocations) isEvent()  {}
func (GetInvocation) isEvent()    {}
func (EnqueueRun) isEvent()       {}
func (Kill) isEvent()             {}
func (Keys) isEvent()             {}
func (Authenticate) isEvent()     {}
func (CreateToken) isEvent()      {}
func (ListTokens) isEvent()       {}
func (RevokeKey) isEvent()        {}
func (ForgetWorker) isEvent()     {}

// Named implements Request.
func (e Hello) Named(id RequestID) Request            { e.Req = id; return e }
func (e Poll) Named(id RequestID) Request             { e.Req = id; return e }
func (e Ack) Named(id RequestID) Request              { e.Req = id; return e }
func (e ExecResult) Named(id RequestID) Request       { e.Req = id; return e }
func (e Chunk) Named(id RequestID) Request            { e.Req = id; return e }
func (e ListWorkers) Named(id RequestID) Request      { e.Req = id; return e }
func (e GetWorker) Named(id RequestID) Request        { e.Req = id; return e }
func (e EnqueueExec) Named(id RequestID) Request      { e.Req = id; return e }
func (e EnqueueSetup) Named(id RequestID) Request     { e.Req = id; return e }
func (e EnqueueHibernate) Named(id RequestID) Request { e.Req = id; return e }
func (e EnqueueReset) Named(id RequestID) Request     { e.Req = id; return e }
func (e EnqueueUpdate) Named(id RequestID) Request    { e.Req = id; return e }
func (e EnqueueRotateKey) Named(id RequestID) Request { e.Req = id; return e }
func (e GetExec) Named(id RequestID) Request          { e.Req = id; return e }
func (e WaitLogs) Named(id RequestID) Request         { e.Req = id; return e }
func (e ListInvocations) Named(id RequestID) Request  { e.Req = id; return e }
func (e GetInvocation) Named(id RequestID) Request    { e.Req = id; return e }
func (e EnqueueRun) Named(id RequestID) Request       { e.Req = id; return e }
func (e Kill) Named(id RequestID) Request             { e.Req = id; return e }
func (e KillExec) Named(id RequestID) Request         { e.Req = id; return e }
func (e SetConfig) Named(id RequestID) Request        { e.Req = id; return e }
func (e Keys) Named(id RequestID) Request             { e.Req = id; return e }
func (e Authenticate) Named(id RequestID) Request     { e.Req = id; return e }
func (e CreateToken) Named(id RequestID) Request      { e.Req = id; return e }
func (e ListTokens) Named(id RequestID) Request       { e.Req = id; return e }
func (e RevokeKey) Named(id RequestID) Request        { e.Req = id; return e }
func (e ForgetWorker) Named(id RequestID) Request     { e.Req = id; return e }

// Authed implements DaemonRequest.
func (e Hello) Authed(a Auth) DaemonRequest        { e.Auth = a; return e }
func (e Poll) Authed(a Auth) DaemonRequest         { e.Auth = a; return e }
func (e Ack) Authed(a Auth) DaemonRequest          { e.Auth = a; return e }
func (e ExecResult) Authed(a Auth) DaemonRequest   { e.Auth = a; return e }
func (e Chunk) Authed(a Auth) DaemonRequest        { e.Auth = a; return e }
func (e Keys) Authed(a Auth) DaemonRequest         { e.Auth = a; return e }
func (e Authenticate) Authed(a Auth) DaemonRequest { e.Auth = a; return e }
