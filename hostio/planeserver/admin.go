package planeserver

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

func (s *Server) adminRoutes(m *http.ServeMux) {
	get := func(path string, build func(r *http.Request) plane.Request) {
		m.HandleFunc("GET "+path, s.admin(func(w http.ResponseWriter, r *http.Request) {
			s.finishAdmin(w, r, build(r))
		}))
	}
	get(operator.PathWorkers, func(*http.Request) plane.Request {
		return plane.ListWorkers{}
	})
	get(operator.PathWorker, func(r *http.Request) plane.Request {
		wid := r.PathValue("id")
		return plane.GetWorker{WorkerID: wid}
	})
	get(operator.PathExecStatus, func(r *http.Request) plane.Request {
		xid := r.PathValue("id")
		return plane.GetExec{ExecID: xid}
	})
	get(operator.PathInvocations, func(*http.Request) plane.Request {
		return plane.ListInvocations{}
	})
	get(operator.PathInvocation, func(r *http.Request) plane.Request {
		iid := r.PathValue("id")
		return plane.GetInvocation{InvocationID: iid}
	})
	m.HandleFunc("GET "+operator.PathExecLogs, s.admin(s.logs))

	post := func(path string, build func(r *http.Request, body []byte) (plane.Request, error)) {
		m.HandleFunc("POST "+path, s.admin(func(w http.ResponseWriter, r *http.Request) {
			body, ok := s.readBody(w, r, MaxResultBody, true)
			if !ok {
				return
			}
			ev, err := build(r, body)
			if err != nil {
				adminError(w, http.StatusBadRequest, "malformed request body: "+err.Error())
				return
			}
			s.finishAdmin(w, r, ev)
		}))
	}
	post(operator.PathExec, func(r *http.Request, body []byte) (plane.Request, error) {
		var req operator.ExecRequest
		err := decodeJSON(body, &req)
		wid := r.PathValue("id")
		return plane.EnqueueExec{WorkerID: wid, Body: req}, err
	})
	post(operator.PathSetup, func(r *http.Request, body []byte) (plane.Request, error) {
		var req operator.SetupRequest
		err := decodeJSON(body, &req)
		wid := r.PathValue("id")
		return plane.EnqueueSetup{WorkerID: wid, Body: req}, err
	})
	post(operator.PathHibernate, func(r *http.Request, body []byte) (plane.Request, error) {
		var req operator.HibernateRequest
		err := decodeJSON(body, &req)
		wid := r.PathValue("id")
		return plane.EnqueueHibernate{WorkerID: wid, Body: req}, err
	})
	post(operator.PathReset, func(r *http.Request, _ []byte) (plane.Request, error) {
		wid := r.PathValue("id")
		return plane.EnqueueReset{WorkerID: wid}, nil
	})
	post(operator.PathUpdate, func(r *http.Request, body []byte) (plane.Request, error) {
		var req operator.UpdateRequest
		err := decodeJSON(body, &req)
		wid := r.PathValue("id")
		return plane.EnqueueUpdate{WorkerID: wid, Body: req}, err
	})
	post(operator.PathRotateKey, func(r *http.Request, _ []byte) (plane.Request, error) {
		wid := r.PathValue("id")
		return plane.EnqueueRotateKey{WorkerID: wid}, nil
	})
	post(operator.PathInvocations, func(_ *http.Request, body []byte) (plane.Request, error) {
		var req operator.RunRequest
		err := decodeJSON(body, &req)
		return plane.EnqueueRun{Body: req}, err
	})
	post(operator.PathKill, func(r *http.Request, _ []byte) (plane.Request, error) {
		iid := r.PathValue("id")
		return plane.Kill{InvocationID: iid}, nil
	})
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
