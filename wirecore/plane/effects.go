package plane

import (
	"fmt"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Effect is one output of Step: Persist, Reply or Park. Within one Step's
// effects, a Persist always comes first, and the host must have applied it
// durably before it sends any Reply of the same Step: a reply never
// promises what a crash could lose.
type Effect interface {
	effect()
}

// Persist asks the host to store a batch of record mutations atomically.
// If the store fails, the host must not send this Step's replies as
// successes; it answers them with 503 and rebuilds the plane from the
// store (Restore), so memory never runs ahead of disk.
type Persist struct {
	Batch Batch
}

// Reply answers request Req. The host encodes Body for the route's wire:
// msgpack for daemon routes (JSON when the request was JSON), JSON for
// operator routes. Body is one of: wire.HelloResponse, wire.PollResponse,
// wire.ValidationError, ErrorBody, OK, LogsRange, or an operator type
// (operator.Worker, []operator.Worker, operator.ExecAccepted,
// operator.CommandAccepted, operator.ExecStatus, operator.Invocation,
// []operator.Invocation).
type Reply struct {
	Req    RequestID
	Status int
	Body   any
	// RetryAfterS, when positive, is the Retry-After the host sends with
	// a refusal that a later attempt may get past (a full fleet).
	RetryAfterS int
	// Forgery is set on a refusal of a request signed by one worker's
	// key acting for another, for the host to log.
	Forgery *Forgery
	// Update is set on the hello of a worker that was sent an ota_update
	// it had not reported yet, for the host to log how it came back.
	Update *UpdateOutcome
}

// UpdateOutcome is how a worker sent an update came back: Running is the
// version its hello reports, Target the one it was sent. Running !=
// Target means its daemon refused the update or rolled it back (or has
// not carried it out yet).
type UpdateOutcome struct {
	WorkerID, Running, Target string
}

// Park tells the host request Req stays open until the plane replies to it
// or Until passes; at Until the host sends PollDeadline{Req}. Parked
// requests are polls and log waits.
type Park struct {
	Req   RequestID
	Until time.Time
}

func (Persist) effect() {}
func (Reply) effect()   {}
func (Park) effect()    {}

// ErrorBody is the {error} body of a 4xx or 5xx answer: msgpack on daemon
// routes ({error: "unknown_worker"}), operator.Error's shape on operator
// routes. Message, when set, says in words what the code means here.
type ErrorBody struct {
	Error   string `msg:"error" json:"error"`
	Message string `msg:"message,omitempty" json:"message,omitempty"`
}

// OK is an empty success body ({} on the wire).
type OK struct{}

// LogsRange answers a WaitLogs: the host reads bytes [Offset, End) of the
// exec's chunks from its store and sends an operator.LogsPage with Done
// set when Finished and the page reaches End.
type LogsRange struct {
	ExecID   string
	Offset   int64
	End      int64
	Finished bool
}

// Error strings of daemon-route 4xx bodies.
const (
	ErrUnknownWorker     = "unknown_worker"
	ErrUnknownExec       = "unknown_exec"
	ErrUnknownInvocation = "unknown_invocation"
	// ErrWorkerLimit refuses the hello of a new machine when the plane
	// already holds Config.MaxWorkers workers.
	ErrWorkerLimit = "worker_limit"
)

// HTTP statuses the plane answers with. The plane does not import net/http;
// these are the numbers.
const (
	StatusOK                  = 200
	StatusBadRequest          = 400
	StatusUnauthorized        = 401
	StatusForbidden           = 403
	StatusNotFound            = 404
	StatusConflict            = 409
	StatusAccepted            = 202
	StatusUnprocessableEntity = 422
	StatusTooManyRequests     = 429
	StatusServiceUnavailable  = 503
)

// CarriesCommands reports whether r is a poll reply with commands in it:
// one its host must report Undelivered when it could not be written.
func (r Reply) CarriesCommands() bool {
	p, ok := r.Body.(wire.PollResponse)
	return ok && len(p.Commands) > 0
}

// AppendMsgpack appends body, a Reply's body on a daemon route, encoded
// as msgpack: the one encoding of them for every host (nymph serve, a
// serverless handler, the simulator).
func AppendMsgpack(b []byte, body any) ([]byte, error) {
	switch v := body.(type) {
	case OK:
		return msgp.AppendMapHeader(b, 0), nil
	case ErrorBody:
		if v.Message == "" {
			b = msgp.AppendMapHeader(b, 1)
			return msgp.AppendString(msgp.AppendString(b, "error"), v.Error), nil
		}
		b = msgp.AppendMapHeader(b, 2)
		b = msgp.AppendString(msgp.AppendString(b, "error"), v.Error)
		return msgp.AppendString(msgp.AppendString(b, "message"), v.Message), nil
	case wire.HelloResponse:
		return v.MarshalMsg(b)
	case wire.PollResponse:
		return v.MarshalMsg(b)
	case wire.ValidationError:
		return v.MarshalMsg(b)
	case wire.PresignResponse:
		return v.MarshalMsg(b)
	case wire.KeyRotationResponse:
		return v.MarshalMsg(b)
	}
	return b, fmt.Errorf("no msgpack encoding for %T", body)
}
