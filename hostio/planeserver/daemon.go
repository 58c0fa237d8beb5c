package planeserver

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	m.HandleFunc("POST "+wire.PathHello, s.daemon(s.decoded("hello", MaxControlBody, helloRequest)))
	m.HandleFunc("POST "+wire.PathPoll, s.daemon(s.decoded("poll", MaxControlBody, pollRequest)))
	m.HandleFunc("POST "+wire.PathAck, s.daemon(s.decoded("ack", MaxResultBody, ackRequest)))
	m.HandleFunc("POST "+wire.PatternExecResult, s.daemon(s.decoded("exec result", MaxResultBody, execResultRequest)))
	m.HandleFunc("POST "+wire.PatternExecChunk, s.daemon(s.decoded("log chunk", MaxChunkBody, chunkRequest)))
	m.HandleFunc("POST "+wire.PatternPresign, s.daemon(s.presign))
	// The plane records no events or streamed results (docs/protocol.md,
	// "Endpoints": never posted by nymph); they are authenticated and
	// accepted, so a peer that posts them is not failed.
	m.HandleFunc("POST "+wire.PathEvent, s.daemon(s.decoded("event", MaxResultBody, authenticateRequest)))
	m.HandleFunc("POST "+wire.PathResultChunk, s.daemon(s.decoded("result chunk", MaxResultBody, authenticateRequest)))
	m.HandleFunc("POST "+wire.PathKeys, s.daemon(s.decoded("key rotation", MaxControlBody, keysRequest)))
	if s.cfg.Blobs != nil {
		m.Handle(BlobPathPrefix, boundChunked(s.cfg.Blobs.Handler(), wire.PayloadMax))
	}
	s.adminRoutes(m)
	m.HandleFunc("GET "+operator.PathMetrics, s.admin(s.serveMetrics))
	s.releaseRoutes(m)
	s.mux = m
}

// daemonHandler serves a daemon route whose credentials were read: a's
// Req is filled in once the body is.
type daemonHandler func(w http.ResponseWriter, r *http.Request, asJSON bool, a plane.Auth)

// daemon wraps a daemon route with the credentials check made on the
// headers alone: a request refused on them is refused before a byte of
// its body is read. An enrolling hello is also held to the per-peer
// enrolment limit here.
func (s *Server) daemon(h daemonHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		asJSON := isJSON(r)
		a, refusal, message := s.daemonCreds(r)
		switch {
		case refusal == plane.ErrMalformedSignature || refusal == plane.ErrSignatureExpired:
			w.Header().Set("Connection", "close")
			_ = writeBody(w, http.StatusUnauthorized, asJSON, plane.ErrorBody{Error: refusal, Message: message})
			return
		case refusal != "":
			refuseBody(w, http.StatusUnauthorized, asJSON, refusal)
			return
		case a.EnrollSecret != "" && !s.enrolls.allow(peerHost(r), s.cfg.Now()):
			w.Header().Set("Retry-After", strconv.Itoa(enrollRetryAfterS))
			w.Header().Set("Connection", "close")
			_ = writeBody(w, http.StatusTooManyRequests, asJSON, plane.ErrorBody{Error: plane.ErrEnrollRateLimited,
				Message: fmt.Sprintf("more than %d enrolling hellos from %s this minute; retry in %d s", EnrollPerMinute, peerHost(r), enrollRetryAfterS)})
			return
		}
		h(w, r, asJSON, a)
	}
}

// Refusals of daemon requests (401 bodies).
const (
	refusedBearer      = "missing or wrong bearer token"
	refusedRelayBearer = "wrong daemon bearer in " + wire.HeaderDaemonAuthorization
	refusedRawRelay    = "a relayed request without " + wire.HeaderDaemonAuthorization +
		": this control plane does not take a relay's word for a daemon (a relay frame without headers cannot carry the daemon's bearer); " +
		"start nymph serve with --trust-relay-daemons to accept daemon requests that carry a valid relay token"
)

func bearerIs(header, token string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// finish answers a request with the loop's reply, or 503 when the loop
// could not take it.
func (s *Server) finish(w http.ResponseWriter, r *http.Request, asJSON bool, req plane.Request) {
	id, rep, err := s.call(r.Context(), req)
	if rep == nil {
		if r.Context().Err() == nil {
			writeError(w, http.StatusServiceUnavailable, asJSON, err.Error())
		}
		return
	}
	if rep.RetryAfterS > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(rep.RetryAfterS))
	}
	if f := rep.Forgery; f != nil {
		s.log.Warn("refused a request signed by one worker's key acting for another",
			"signer", f.Signer, "target", f.Target, "request", f.What, "path", r.URL.Path, "peer", r.RemoteAddr)
	}
	if u := rep.Update; u != nil && u.Running == u.Target {
		s.log.Info("worker came back with the version of its update", "worker", u.WorkerID, "version", u.Running)
	} else if u != nil {
		s.log.Warn("worker came back without its update: refused or rolled back (its daemon's log says which), or not carried out yet",
			"worker", u.WorkerID, "version", u.Running, "target", u.Target)
	}
	if e, ok := rep.Body.(plane.ErrorBody); ok && e.Error == plane.ErrWorkerLimit {
		s.log.Debug("hello refused for the worker limit", "message", e.Message)
		s.workerLimitLogged.Do(func() {
			s.log.Warn("refusing the hello of a new machine: the worker limit is reached; later ones are logged at debug level", "message", e.Message)
		})
	}
	// A poll the daemon already abandoned (its connection closed while the
	// reply was being decided) must not swallow commands: a write into a
	// closing connection often "succeeds", so check the request first.
	sent := err == nil && r.Context().Err() == nil &&
		writeBody(w, rep.Status, asJSON, rep.Body) == nil &&
		http.NewResponseController(w).Flush() == nil
	if !sent && rep.CarriesCommands() {
		// The daemon gave up on this poll (it does whenever local work
		// ends): its commands must not be lost with the connection.
		s.log.Debug("poll reply not delivered; requeueing its commands", "req", id)
		s.undeliver(id)
	}
}

// bodyRequest decodes a daemon route's body (JSON where asJSON) into the
// request the core takes; execID is the path's {exec_id}, "" where the
// route has none. The route's handler (decoded) and its fuzz target both
// decode through it.
type bodyRequest func(execID string, body []byte, asJSON bool) (plane.DaemonRequest, error)

// decoded serves a daemon route whose body is one core request: read under
// limit, decoded by request, given the credentials (the signature covers
// the body as read), finished by the core; a body that does not decode is
// a 400 "malformed <what>".
func (s *Server) decoded(what string, limit int64, request bodyRequest) daemonHandler {
	return func(w http.ResponseWriter, r *http.Request, asJSON bool, a plane.Auth) {
		body, ok := s.readBody(w, r, limit, asJSON)
		if !ok {
			return
		}
		req, err := request(r.PathValue("exec_id"), body, asJSON)
		if err != nil {
			writeError(w, http.StatusBadRequest, asJSON, "malformed "+what+": "+err.Error())
			return
		}
		a.Req = identity.NewRequest(r.Method, s.signedPath(r), body)
		s.finish(w, r, asJSON, req.Authed(a))
	}
}

// signedPath is the path a daemon signed r over: the route's path as
// sent, or for a log chunk the path of the stdout_url serve handed out
// (the public URL's path, which a proxy strips, before the route's).
func (s *Server) signedPath(r *http.Request) string {
	if r.Pattern == "POST "+wire.PatternExecChunk {
		return s.chunkPathPrefix + r.URL.EscapedPath()
	}
	return r.URL.EscapedPath()
}

// helloRequest reads a hello body: the first required key it lacks (then
// nothing else is decoded), else the request.
func helloRequest(_ string, body []byte, _ bool) (plane.DaemonRequest, error) {
	var req wire.HelloRequest
	missing, err := plane.MissingHelloField(body)
	if err == nil && missing == "" {
		err = decodeMsgpack(body, &req)
	}
	return plane.Hello{Body: req, Missing: missing}, err
}

// pollRequest, ackRequest and keysRequest read their bodies as msgpack
// alone.
var (
	pollRequest = fromMsgpack(func(b wire.PollRequest) plane.DaemonRequest { return plane.Poll{Body: b} })
	ackRequest  = fromMsgpack(func(b wire.Ack) plane.DaemonRequest { return plane.Ack{Body: b} })
	keysRequest = fromMsgpack(func(b wire.KeyRotationRequest) plane.DaemonRequest { return plane.Keys{Body: b} })
)

// fromMsgpack decodes a msgpack body into the route's body type (whatever
// the content type says, as the protocol has these bodies in msgpack
// only) and makes the route's request from it.
func fromMsgpack[T any, P interface {
	*T
	msgp.Unmarshaler
}](build func(T) plane.DaemonRequest) bodyRequest {
	return func(_ string, raw []byte, _ bool) (plane.DaemonRequest, error) {
		var body T
		if err := decodeMsgpack(raw, P(&body)); err != nil {
			return nil, err
		}
		return build(body), nil
	}
}

// execResultRequest takes the result as msgpack or, as docs/protocol.md,
// "Exec result" allows, as JSON.
func execResultRequest(execID string, body []byte, asJSON bool) (plane.DaemonRequest, error) {
	var res wire.ExecResult
	var err error
	if asJSON {
		res, err = decodeExecResultJSON(body)
	} else {
		err = decodeMsgpack(body, &res)
	}
	return plane.ExecResult{ExecID: execID, Body: res}, err
}

// chunkRequest takes raw log bytes, whatever the content type says.
func chunkRequest(execID string, body []byte, _ bool) (plane.DaemonRequest, error) {
	return plane.Chunk{ExecID: execID, Data: body}, nil
}

// authenticateRequest takes a body the plane does not read: only the
// request's credentials are checked.
func authenticateRequest(string, []byte, bool) (plane.DaemonRequest, error) {
	return plane.Authenticate{}, nil
}

func (s *Server) presign(w http.ResponseWriter, r *http.Request, asJSON bool, a plane.Auth) {
	body, ok := s.readBody(w, r, MaxControlBody, asJSON)
	if !ok {
		return
	}
	a.Req = identity.NewRequest(r.Method, s.signedPath(r), body)
	if !s.authenticated(w, r, asJSON, a) {
		return
	}
	s.presignBlob(w, r, body, asJSON)
}

// presignBlob answers a presign, the daemon's or an operator's, once its
// credentials were checked.
func (s *Server) presignBlob(w http.ResponseWriter, r *http.Request, body []byte, asJSON bool) {
	if s.cfg.Blobs == nil {
		writeError(w, http.StatusNotImplemented, asJSON, "this control plane has no payload store")
		return
	}
	req, err := decodePresign(body, asJSON)
	if err != nil {
		writeError(w, http.StatusBadRequest, asJSON, "malformed presign: "+err.Error())
		return
	}
	overwrite := req.Overwrite != nil && *req.Overwrite
	p := Presign{Namespace: r.PathValue("ns"), Op: req.Op, Key: req.Key, JobID: req.JobID, Kind: req.Kind, Overwrite: overwrite}
	if req.Size != nil {
		p.Size = int64(*req.Size)
	}
	resp, err := s.cfg.Blobs.Presign(p, s.cfg.Now())
	switch {
	case errors.Is(err, ErrPresignInvalid):
		writeError(w, http.StatusBadRequest, asJSON, err.Error())
	case errors.Is(err, ErrPresignNotFound):
		writeError(w, http.StatusNotFound, asJSON, err.Error())
	case errors.Is(err, ErrPresignConflict):
		writeError(w, http.StatusConflict, asJSON, err.Error())
	case err != nil:
		s.log.Error("presign failed", "ns", r.PathValue("ns"), "op", req.Op, "key", req.Key, "err", err)
		writeError(w, http.StatusInternalServerError, asJSON, "presign failed")
	default:
		_ = writeBody(w, http.StatusOK, asJSON, resp)
	}
}

// authenticated has the plane check the credentials of a request it does
// not otherwise see, and answers its refusal.
func (s *Server) authenticated(w http.ResponseWriter, r *http.Request, asJSON bool, a plane.Auth) bool {
	_, rep, err := s.call(r.Context(), plane.Authenticate{Auth: a})
	switch {
	case rep == nil:
		if r.Context().Err() == nil {
			writeError(w, http.StatusServiceUnavailable, asJSON, err.Error())
		}
		return false
	case rep.Status != http.StatusOK:
		_ = writeBody(w, rep.Status, asJSON, rep.Body)
		return false
	}
	return true
}

// decodePresign reads a presign body, JSON where asJSON, else msgpack.
func decodePresign(body []byte, asJSON bool) (req wire.PresignRequest, err error) {
	if asJSON {
		err = json.Unmarshal(body, &req)
	} else {
		err = decodeMsgpack(body, &req)
	}
	return req, err
}

// adminError is an operator-route error body.
func adminError(w http.ResponseWriter, status int, msg string) {
	_ = writeBody(w, status, true, operator.Error{Error: msg})
}

// decodeExecResultJSON reads a JSON exec result. Numbers are lenient, as
// on the msgpack side: a peer may send 12 or 12.0 (or 12.5 milliseconds).
func decodeExecResultJSON(body []byte) (wire.ExecResult, error) {
	var in struct {
		ExitCode   json.Number `json:"exit_code"`
		Stdout     string      `json:"stdout"`
		Stderr     string      `json:"stderr"`
		DurationMS json.Number `json:"duration_ms"`
		Error      *string     `json:"error"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return wire.ExecResult{}, err
	}
	code, err := jsonInt(in.ExitCode)
	if err != nil {
		return wire.ExecResult{}, fmt.Errorf("exit_code: %w", err)
	}
	ms, err := jsonInt(in.DurationMS)
	if err != nil {
		return wire.ExecResult{}, fmt.Errorf("duration_ms: %w", err)
	}
	return wire.ExecResult{ExitCode: wire.Int(code), Stdout: in.Stdout, Stderr: in.Stderr, DurationMS: wire.Int(ms), Error: in.Error}, nil
}

func jsonInt(n json.Number) (int64, error) {
	if n == "" {
		return 0, nil
	}
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || f > math.MaxInt64 || f < math.MinInt64 {
		return 0, fmt.Errorf("%q is not a number in range", n)
	}
	return int64(f), nil
}
