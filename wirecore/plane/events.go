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

// Event is one input to Step. Every event carries the current time.
type Event interface {
	eventTime() time.Time
}

// At is the time part every event embeds.
type At struct{ Now time.Time }

func (a At) eventTime() time.Time { return a.Now }

// Hello is POST /v1/daemon/hello. Missing is the dotted path of the first
// required key absent from the raw body (MissingHelloField), "" when all
// are present.
type Hello struct {
	At
	Req     RequestID
	Body    wire.HelloRequest
	Missing string
}

// Poll is POST /v1/daemon/poll.
type Poll struct {
	At
	Req  RequestID
	Body wire.PollRequest
}

// PollDeadline fires when a parked poll or log wait reaches the Until of
// its Park effect. A deadline for a request already answered is ignored.
type PollDeadline struct {
	At
	Req RequestID
}

// Gone says the client of a parked request went away: forget it.
type Gone struct {
	At
	Req RequestID
}

// Undelivered says the reply to poll Req never reached its daemon: the
// client had gone before the host could write it (the daemon abandons a
// parked poll whenever a local exec or setup ends). The commands of that
// reply go back to the front of the worker's queue.
type Undelivered struct {
	At
	Req RequestID
}

// Ack is POST /v1/daemon/ack.
type Ack struct {
	At
	Req  RequestID
	Body wire.Ack
}

// ExecResult is POST /v1/daemon/exec/{exec_id}/result.
type ExecResult struct {
	At
	Req    RequestID
	ExecID string
	Body   wire.ExecResult
}

// Chunk is POST /v1/daemon/exec/{exec_id}/chunk: raw log bytes. Data is
// referenced by the Batch until the host applied it.
type Chunk struct {
	At
	Req    RequestID
	ExecID string
	Data   []byte
}

// Tick is a clock tick: the plane marks lost workers and expires parked
// requests whose deadline passed. A host ticks about once a second.
type Tick struct{ At }

// Operator requests (the admin API of wirecore/operator).

// ListWorkers is GET operator.PathWorkers.
type ListWorkers struct {
	At
	Req RequestID
}

// GetWorker is GET operator.PathWorker.
type GetWorker struct {
	At
	Req      RequestID
	WorkerID string
}

// EnqueueExec is POST operator.PathExec.
type EnqueueExec struct {
	At
	Req      RequestID
	WorkerID string
	Body     operator.ExecRequest
}

// EnqueueSetup is POST operator.PathSetup.
type EnqueueSetup struct {
	At
	Req      RequestID
	WorkerID string
	Body     operator.SetupRequest
}

// EnqueueHibernate is POST operator.PathHibernate.
type EnqueueHibernate struct {
	At
	Req      RequestID
	WorkerID string
	Body     operator.HibernateRequest
}

// EnqueueReset is POST operator.PathReset (a reset_backoff command).
type EnqueueReset struct {
	At
	Req      RequestID
	WorkerID string
}

// EnqueueUpdate is POST operator.PathUpdate: an ota_update command, and
// target_nymph_version on the worker's polls until it reports the version.
type EnqueueUpdate struct {
	At
	Req      RequestID
	WorkerID string
	Body     operator.UpdateRequest
}

// EnqueueRotateKey is POST operator.PathRotateKey.
type EnqueueRotateKey struct {
	At
	Req      RequestID
	WorkerID string
}

// GetExec is GET operator.PathExecStatus.
type GetExec struct {
	At
	Req    RequestID
	ExecID string
}

// WaitLogs is GET operator.PathExecLogs: answered at once when bytes past
// Offset exist or the exec finished, else parked for up to WaitS seconds.
type WaitLogs struct {
	At
	Req    RequestID
	ExecID string
	Offset int64
	WaitS  float64
}

// ListInvocations is GET operator.PathInvocations.
type ListInvocations struct {
	At
	Req RequestID
}

// GetInvocation is GET operator.PathInvocation.
type GetInvocation struct {
	At
	Req          RequestID
	InvocationID string
}

// EnqueueRun is POST operator.PathInvocations.
type EnqueueRun struct {
	At
	Req  RequestID
	Body operator.RunRequest
}

// Kill is POST operator.PathKill: a queued invocation becomes killed; a
// running one answers 409 (the protocol has no cancel command).
type Kill struct {
	At
	Req          RequestID
	InvocationID string
}
