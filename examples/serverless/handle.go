// Package serverless is a control plane in the shape of a serverless
// handler: every request restores wirecore/plane from a stored state,
// steps the one event the request is, and hands back the reply and the
// state to store. planewasm exports Handle to JavaScript, planewasi to a
// WASI host; plane.js is the handler around either. It imports the cores
// alone: no hostio.
//
// Kept small on purpose: bearer tokens only (signatures and join tokens
// are not read), msgpack bodies on daemon routes, a few operator routes,
// and log chunks counted but not kept.
package serverless

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Request is one HTTP request as the runtime hands it over.
type Request struct {
	Method, Path  string
	Authorization string // the Authorization header
	Body          []byte
}

// Tokens are the bearer tokens: Daemon for /v1/daemon/ routes (empty:
// daemons need none), Admin for /v1/admin/ routes (empty: refused).
type Tokens struct {
	Daemon, Admin string
}

// Response is the answer to send and the state to store first.
type Response struct {
	// State is the state to store before the answer is sent (JSON of
	// stored): new after a step that persisted or answered a daemon, as
	// a poll moves its worker's LastSeen without a Persist; the state
	// passed in otherwise.
	State       []byte
	Status      int
	ContentType string
	Body        []byte
	// Parked says a poll found nothing and was answered empty at once:
	// the handler may ask again a little later before it answers.
	Parked bool
	// RetryAfterS, when positive, is the answer's Retry-After header, in
	// seconds (a refusal that says when to come back).
	RetryAfterS int
}

// stored is the state a handler keeps between requests.
type stored struct {
	Plane plane.Snapshot `json:"plane"`
	// Since is when this plane's state began. Every restore is the same
	// plane going on, not a restart, so health counts from here
	// (plane.CountHealthFrom), not from the restore.
	Since time.Time `json:"since"`
}

// Handle restores the plane from state (empty for a fresh plane), gives
// it its clock Tick (a worker that stopped polling is found lost on the
// next request, whichever it is), steps req as the event it is at now,
// and returns the encoded reply with the state to store.
func Handle(state []byte, now time.Time, req Request, tokens Tokens, entropy io.Reader) (Response, error) {
	st := stored{Since: now}
	if len(state) > 0 {
		// Strict: a state of another shape (a bare Snapshot of an earlier
		// version) is refused, not read as an empty plane.
		dec := json.NewDecoder(bytes.NewReader(state))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			return Response{}, fmt.Errorf("decode state: %w", err)
		}
	}
	// Health is read from the stored state on the next request, so a
	// poll's LastSeen is stored often enough for it (a fraction of the
	// lost window), not every few minutes as a long-lived plane does.
	cfg := plane.Config{Entropy: entropy, PersistSeenEvery: plane.DefaultLostAfter / 4}
	p, err := plane.Restore(cfg, st.Plane, now)
	if err != nil {
		return Response{}, fmt.Errorf("restore plane: %w", err)
	}
	p.CountHealthFrom(st.Since)
	// A fresh restore holds no parked request: a Tick changes records only.
	changed := slices.ContainsFunc(p.Step(now, plane.Tick{}), isPersist)
	admin := strings.HasPrefix(req.Path, "/v1/admin/")
	answer := func(status int, body any) (Response, error) {
		r, err := encode(admin, status, body)
		r.State = state
		return r, err
	}
	if admin && !bearerIs(req.Authorization, tokens.Admin) {
		return answer(plane.StatusUnauthorized, plane.ErrorBody{Error: "missing or wrong admin bearer token"})
	}
	ev, err := event(req.Method, req.Path, req.Body)
	switch {
	case err != nil:
		return answer(plane.StatusBadRequest, plane.ErrorBody{Error: err.Error()})
	case ev == nil:
		return answer(plane.StatusNotFound, plane.ErrorBody{Error: "no route " + req.Method + " " + req.Path})
	}
	if d, ok := ev.(plane.DaemonRequest); ok {
		bearer := tokens.Daemon == "" || bearerIs(req.Authorization, tokens.Daemon)
		ev = d.Authed(plane.Auth{Bearer: bearer})
	}

	// One request, so one id. A Park is answered at once, by stepping its
	// deadline: this instance is gone before any later event could come.
	const id = plane.RequestID(1)
	var reply *plane.Reply
	carryOut := func(effects []plane.Effect) (park *plane.Park) {
		for _, eff := range effects {
			switch e := eff.(type) {
			case plane.Persist:
				changed = true // the Snapshot taken below holds it
			case plane.Reply:
				reply = &e
			case plane.Park:
				park = &e
			}
		}
		return park
	}
	park := carryOut(p.Step(now, ev.Named(id)))
	if park != nil {
		carryOut(p.Step(now, plane.PollDeadline{Req: park.Req}))
	}
	if reply == nil {
		return Response{}, fmt.Errorf("step %T: the plane did not answer", ev)
	}
	r, err := encode(admin, reply.Status, reply.Body)
	if err != nil {
		return Response{}, err
	}
	r.State, r.Parked, r.RetryAfterS = state, park != nil, reply.RetryAfterS
	if changed {
		if r.State, err = json.Marshal(stored{Plane: p.Snapshot(), Since: st.Since}); err != nil {
			return Response{}, fmt.Errorf("encode state: %w", err)
		}
	}
	return r, nil
}

func isPersist(e plane.Effect) bool { _, ok := e.(plane.Persist); return ok }

func bearerIs(header, token string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// event decodes a request into the plane event it is: daemon bodies are
// msgpack, operator bodies JSON. It is nil, without an error, when no
// route matches.
func event(method, path string, body []byte) (plane.Request, error) {
	get, post := method == "GET", method == "POST"
	if id, ok := param(wire.PatternExecResult, path); ok && post {
		var b wire.ExecResult
		err := unmarshal("exec result", body, &b)
		return plane.ExecResult{ExecID: id, Body: b}, err
	}
	if id, ok := param(wire.PatternExecChunk, path); ok && post {
		return plane.Chunk{ExecID: id, Data: body}, nil
	}
	if id, ok := param(operator.PathExec, path); ok && post {
		var b operator.ExecRequest
		if len(body) > 0 {
			if err := json.Unmarshal(body, &b); err != nil {
				return nil, fmt.Errorf("malformed request body: %w", err)
			}
		}
		return plane.EnqueueExec{WorkerID: id, Body: b}, nil
	}
	if id, ok := param(operator.PathExecStatus, path); ok && get {
		return plane.GetExec{ExecID: id}, nil
	}
	if id, ok := param(operator.PathWorker, path); ok && get {
		return plane.GetWorker{WorkerID: id}, nil
	}
	switch {
	case post && path == wire.PathHello:
		missing, err := plane.MissingHelloField(body)
		if err != nil {
			return nil, fmt.Errorf("malformed hello: %w", err)
		}
		if missing != "" {
			return plane.Hello{Missing: missing}, nil
		}
		var b wire.HelloRequest
		err = unmarshal("hello", body, &b)
		return plane.Hello{Body: b}, err
	case post && path == wire.PathPoll:
		var b wire.PollRequest
		err := unmarshal("poll", body, &b)
		return plane.Poll{Body: b}, err
	case post && path == wire.PathAck:
		var b wire.Ack
		err := unmarshal("ack", body, &b)
		return plane.Ack{Body: b}, err
	case get && path == operator.PathWorkers:
		return plane.ListWorkers{}, nil
	}
	return nil, nil
}

// param matches path against a pattern with one {name} segment and
// returns that segment, unescaped.
func param(pattern, path string) (string, bool) {
	before, rest, _ := strings.Cut(pattern, "{")
	_, after, _ := strings.Cut(rest, "}")
	mid, hasPrefix := strings.CutPrefix(path, before)
	mid, hasSuffix := strings.CutSuffix(mid, after)
	if !hasPrefix || !hasSuffix || mid == "" || strings.Contains(mid, "/") {
		return "", false
	}
	id, err := url.PathUnescape(mid)
	return id, err == nil
}

// unmarshal decodes a whole msgpack body; trailing bytes are an error.
func unmarshal(what string, body []byte, dst msgp.Unmarshaler) error {
	rest, err := dst.UnmarshalMsg(body)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	if err != nil {
		return fmt.Errorf("malformed %s: %w", what, err)
	}
	return nil
}

// encode writes a reply body: JSON on operator routes, msgpack on daemon
// routes (the types a daemon route's Reply carries).
func encode(admin bool, status int, body any) (Response, error) {
	r := Response{Status: status, ContentType: wire.ContentTypeMsgpack}
	var err error
	if admin {
		r.ContentType = wire.ContentTypeJSON
		switch v := body.(type) {
		case plane.OK:
			r.Body = []byte("{}")
		case plane.ErrorBody:
			r.Body, err = json.Marshal(operator.Error{Error: v.Error})
		default:
			r.Body, err = json.Marshal(body)
		}
		if err != nil {
			return r, fmt.Errorf("encode %T: %w", body, err)
		}
		return r, nil
	}
	if r.Body, err = plane.AppendMsgpack(nil, body); err != nil {
		return r, fmt.Errorf("encode %T: %w", body, err)
	}
	return r, nil
}
