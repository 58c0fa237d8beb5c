package planeserver

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

// adminRoute is one route of the operator API: its method and pattern,
// and the plane request a call of it makes from the path's {id} (empty
// when the pattern has none) and the body. A POST's body is read under
// MaxResultBody first, a GET's never; a body that does not decode is a
// 400.
type adminRoute struct {
	method, pattern string
	request         func(id string, body []byte) (plane.Request, error)
}

// adminRouteTable is the operator API but its logs route, which the store
// finishes (logs), and token minting, which draws the token's secret
// (createToken).
var adminRouteTable = [...]adminRoute{
	{"GET", operator.PathWorkers, fromPath(func(string) plane.Request { return plane.ListWorkers{} })},
	{"GET", operator.PathWorker, fromPath(func(id string) plane.Request { return plane.GetWorker{WorkerID: id} })},
	{"DELETE", operator.PathWorker, fromPath(func(id string) plane.Request { return plane.ForgetWorker{WorkerID: id} })},
	{"GET", operator.PathExecStatus, fromPath(func(id string) plane.Request { return plane.GetExec{ExecID: id} })},
	{"GET", operator.PathInvocations, fromPath(func(string) plane.Request { return plane.ListInvocations{} })},
	{"GET", operator.PathInvocation, fromPath(func(id string) plane.Request { return plane.GetInvocation{InvocationID: id} })},
	{"POST", operator.PathExec, fromJSON(func(id string, b operator.ExecRequest) plane.Request { return plane.EnqueueExec{WorkerID: id, Body: b} })},
	{"POST", operator.PathSetup, fromJSON(func(id string, b operator.SetupRequest) plane.Request {
		return plane.EnqueueSetup{WorkerID: id, Body: b}
	})},
	{"POST", operator.PathHibernate, fromJSON(func(id string, b operator.HibernateRequest) plane.Request {
		return plane.EnqueueHibernate{WorkerID: id, Body: b}
	})},
	{"POST", operator.PathReset, fromPath(func(id string) plane.Request { return plane.EnqueueReset{WorkerID: id} })},
	{"POST", operator.PathUpdate, fromJSON(func(id string, b operator.UpdateRequest) plane.Request {
		return plane.EnqueueUpdate{WorkerID: id, Body: b}
	})},
	{"POST", operator.PathConfig, fromJSON(func(id string, b operator.ConfigRequest) plane.Request {
		return plane.SetConfig{WorkerID: id, Set: b.Set}
	})},
	{"POST", operator.PathRotateKey, fromPath(func(id string) plane.Request { return plane.EnqueueRotateKey{WorkerID: id} })},
	{"POST", operator.PathInvocations, fromJSON(func(_ string, b operator.RunRequest) plane.Request { return plane.EnqueueRun{Body: b} })},
	{"POST", operator.PathKill, fromJSON(func(id string, b operator.KillRequest) plane.Request {
		return plane.Kill{InvocationID: id, Reason: b.Reason}
	})},
	{"POST", operator.PathKillExec, fromJSON(func(id string, b operator.KillRequest) plane.Request {
		return plane.KillExec{ExecID: id, Reason: b.Reason}
	})},
	{"POST", operator.PathRevokeKey, fromPath(func(id string) plane.Request { return plane.RevokeKey{WorkerID: id} })},
	{"GET", operator.PathTokens, fromPath(func(string) plane.Request { return plane.ListTokens{} })},
}

// fromPath makes a route's request from its path alone; a POST's body is
// read and ignored.
func fromPath(build func(id string) plane.Request) func(string, []byte) (plane.Request, error) {
	return func(id string, _ []byte) (plane.Request, error) { return build(id), nil }
}

// fromJSON decodes the body into the route's request type (decodeJSON)
// and makes the route's request from the path and that.
func fromJSON[T any](build func(id string, body T) plane.Request) func(string, []byte) (plane.Request, error) {
	return func(id string, raw []byte) (plane.Request, error) {
		var body T
		if err := decodeJSON(raw, &body); err != nil {
			return nil, err
		}
		return build(id, body), nil
	}
}

func (s *Server) adminRoutes(m *http.ServeMux) {
	for _, rt := range adminRouteTable {
		m.HandleFunc(rt.method+" "+rt.pattern, s.admin(s.adminHandler(rt)))
	}
	m.HandleFunc("GET "+operator.PathExecLogs, s.admin(s.logs))
	m.HandleFunc("POST "+operator.PathTokens, s.admin(s.createToken))
	m.HandleFunc("POST "+operator.PathPresign, s.admin(s.adminPresign))
}

// adminPresign presigns an operator's payload upload (or download): the
// daemons' presign, behind the admin bearer instead of a daemon's.
func (s *Server) adminPresign(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, MaxControlBody, true)
	if !ok {
		return
	}
	s.presignBlob(w, r, body, true)
}

// adminHandler serves one route of adminRouteTable.
func (s *Server) adminHandler(rt adminRoute) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if rt.method == http.MethodPost {
			var ok bool
			if body, ok = s.readBody(w, r, MaxResultBody, true); !ok {
				return
			}
		}
		req, err := rt.request(r.PathValue("id"), body)
		if err != nil {
			adminError(w, http.StatusBadRequest, "malformed request body: "+err.Error())
			return
		}
		if u, ok := req.(plane.EnqueueUpdate); ok && u.Body.URL == "" && u.Body.SHA256 == "" {
			if req, ok = s.deriveUpdate(w, r, u); !ok {
				return
			}
		}
		s.finishAdmin(w, r, req)
	}
}

// decodeJSON decodes an operator request body; an empty body is {}.
func decodeJSON(body []byte, dst any) error {
	if len(body) == 0 {
		return nil
	}
	return json.Unmarshal(body, dst)
}

// admin wraps an operator route with the admin bearer check.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !bearerIs(r.Header.Get("Authorization"), s.cfg.AdminToken) {
			w.Header().Set("Connection", "close") // its body is never read
			adminError(w, http.StatusUnauthorized, "missing or wrong admin bearer token")
			return
		}
		h(w, r)
	}
}

func (s *Server) finishAdmin(w http.ResponseWriter, r *http.Request, req plane.Request) {
	_, rep, err := s.call(r.Context(), req)
	if err != nil {
		if r.Context().Err() == nil {
			adminError(w, http.StatusServiceUnavailable, err.Error())
		}
		return
	}
	s.finishedAdmin(w, rep)
}

// finishedAdmin writes the plane's answer to an operator request.
func (s *Server) finishedAdmin(w http.ResponseWriter, rep *plane.Reply) {
	if e, ok := rep.Body.(plane.ErrorBody); ok { // loop-level failures
		adminError(w, rep.Status, e.Error)
		return
	}
	_ = writeBody(w, rep.Status, true, rep.Body)
}

// logs answers GET /v1/admin/execs/{id}/logs?offset=N&wait_s=S: the plane
// says which bytes exist (waiting for some when asked), the store has them.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var offset int64
	var wait float64
	var err error
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil {
			adminError(w, http.StatusBadRequest, "offset: "+err.Error())
			return
		}
	}
	if v := q.Get("wait_s"); v != "" {
		if wait, err = strconv.ParseFloat(v, 64); err != nil {
			adminError(w, http.StatusBadRequest, "wait_s: "+err.Error())
			return
		}
	}
	execID := r.PathValue("id")
	_, rep, err := s.call(r.Context(), plane.WaitLogs{ExecID: execID, Offset: offset, WaitS: wait})
	if err != nil {
		if r.Context().Err() == nil {
			adminError(w, http.StatusServiceUnavailable, err.Error())
		}
		return
	}
	rng, ok := rep.Body.(plane.LogsRange)
	if !ok {
		if e, isErr := rep.Body.(plane.ErrorBody); isErr {
			adminError(w, rep.Status, e.Error)
			return
		}
		_ = writeBody(w, rep.Status, true, rep.Body)
		return
	}
	page := operator.LogsPage{Offset: rng.Offset, NextOffset: rng.Offset, Data: []byte{}}
	if n := min(rng.End-rng.Offset, MaxLogPage); n > 0 {
		data, err := s.cfg.Store.ReadChunks(r.Context(), rng.ExecID, rng.Offset, int(n))
		if err != nil {
			s.log.Error("read log chunks", "exec", rng.ExecID, "offset", rng.Offset, "err", err)
			adminError(w, http.StatusInternalServerError, "reading logs failed")
			return
		}
		page.Data = data
		page.NextOffset = rng.Offset + int64(len(data))
	}
	page.Done = rng.Finished && page.NextOffset >= rng.End
	_ = writeBody(w, http.StatusOK, true, page)
}
