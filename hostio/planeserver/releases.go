package planeserver

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// releaseRoutes serves Config.Releases: GET operator.PathRelease for the
// SHA256SUMS file and every binary it lists, and nothing else of the
// directory. No credential is asked for: a release is a public artefact,
// and a daemon checks it by the sha256 its authenticated poll carried
// (hostio/selfupdate sends none, to any host). A POST with no body is
// answered as the GET (DownloadByPost): it is how a daemon behind a relay
// downloads, and the credentials a relay adds are not looked at.
func (s *Server) releaseRoutes(m *http.ServeMux) {
	if s.cfg.Releases == "" {
		return
	}
	m.HandleFunc("GET "+operator.PathRelease, s.release)
	m.HandleFunc("POST "+operator.PathRelease, DownloadByPost(s.release))
}

// releaseSums reads the releases directory's SHA256SUMS.
func (s *Server) releaseSums() (map[string]string, error) {
	path := filepath.Join(s.cfg.Releases, plane.ReleaseSums)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("planeserver: releases: %w", err)
	}
	sums, err := plane.ParseReleaseSums(data)
	if err != nil {
		return nil, fmt.Errorf("planeserver: releases: %s: %w", path, err)
	}
	return sums, nil
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	sums, err := s.releaseSums()
	if err != nil {
		s.log.Error("releases unreadable", "err", err)
		http.Error(w, "releases unreadable", http.StatusInternalServerError)
		return
	}
	if _, listed := sums[name]; !listed && name != plane.ReleaseSums {
		http.Error(w, "no such release", http.StatusNotFound)
		return
	}
	f, err := os.Open(filepath.Join(s.cfg.Releases, name))
	if err != nil {
		s.log.Error("release listed but unreadable", "name", name, "err", err)
		http.Error(w, "release unreadable", http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.Error(w, "release unreadable", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	s.log.Info("release served", "name", name, "peer", r.RemoteAddr)
	http.ServeContent(w, r, name, st.ModTime(), f)
}

// errNoRelease marks an update with no binary for the worker.
var errNoRelease = errors.New("unreachable")

// deriveUpdate fills in the url and sha256 of an update that names
// neither, from the releases directory and the worker's reported
// platform (the version, when empty, is the latest there). It answers
// the request itself and returns false when it cannot.
func (s *Server) deriveUpdate(w http.ResponseWriter, r *http.Request, u plane.EnqueueUpdate) (plane.Request, bool) {
	if s.cfg.Releases == "" {
		adminError(w, http.StatusUnprocessableEntity, "update: url and sha256 are required: this server has no --releases to derive them from")
		return nil, false
	}
	_, rep, err := s.call(r.Context(), plane.GetWorker{WorkerID: u.WorkerID})
	if err != nil {
		if r.Context().Err() == nil {
			adminError(w, http.StatusServiceUnavailable, err.Error())
		}
		return nil, false
	}
	if rep.Status != http.StatusOK {
		s.finishedAdmin(w, rep)
		return nil, false
	}
	view, ok := rep.Body.(operator.Worker)
	if !ok {
		adminError(w, http.StatusInternalServerError, fmt.Sprintf("update: worker view is %T", rep.Body))
		return nil, false
	}
	sums, err := s.releaseSums()
	if err != nil {
		adminError(w, http.StatusInternalServerError, err.Error())
		return nil, false
	}
	rel, err := plane.ReleaseFor(sums, reportedVersions(view.Versions), u.Body.Version)
	if err != nil {
		adminError(w, http.StatusConflict, fmt.Sprintf("%v: %v", errNoRelease, err))
		return nil, false
	}
	u.Body = operator.UpdateRequest{Version: rel.Version, SHA256: rel.SHA256,
		URL: s.releaseURL(rel.Name)}
	return u, true
}

// reportedVersions reads back the kernel and arch of a worker view's
// versions (a JSON map there).
func reportedVersions(m map[string]any) wire.Versions {
	var v wire.Versions
	str := func(k string) *string {
		if s, ok := m[k].(string); ok {
			return &s
		}
		return nil
	}
	v.Kernel, v.Arch, v.Daemon = str("kernel"), str("arch"), str("daemon")
	return v
}

// releaseURL is where a daemon downloads release name: on the public URL
// daemons reach this server at.
func (s *Server) releaseURL(name string) string {
	return strings.TrimRight(s.cfg.PublicURL, "/") + strings.Replace(operator.PathRelease, "{name}", url.PathEscape(name), 1)
}
