package planeserver

import (
	"context"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

// DefaultAutoUpdateEvery is how often at most a worker is sent an
// automatic update: the daemon's auto_update_check_interval_s default.
const DefaultAutoUpdateEvery = time.Hour

// autoUpdateLook is how often the workers are looked at, so a worker
// that says hello with another version is sent its update soon.
const autoUpdateLook = 5 * time.Second

// autoUpdate sends an ota_update to every worker whose daemon version is
// not Plane.TargetVersion, derived from Releases as an operator's update
// without a url is, at most once per AutoUpdateEvery per worker. It runs
// only with both a target version and a releases directory, until ctx
// ends. A worker with no release for its platform is logged once per
// interval, as is a worker that was sent the update and still reports
// another version (its daemon refused or rolled back the update).
func (s *Server) autoUpdate(ctx context.Context) {
	target := s.cfg.Plane.TargetVersion
	if target == "" || s.cfg.Releases == "" {
		return
	}
	every := s.cfg.AutoUpdateEvery
	if every <= 0 {
		every = DefaultAutoUpdateEvery
	}
	look := min(autoUpdateLook, every)
	sent := map[string]time.Time{}
	t := time.NewTicker(look)
	defer t.Stop()
	for {
		s.autoUpdateOnce(ctx, target, every, sent)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) autoUpdateOnce(ctx context.Context, target string, every time.Duration, sent map[string]time.Time) {
	_, rep, err := s.call(ctx, plane.ListWorkers{})
	if err != nil {
		return
	}
	ws, _ := rep.Body.([]operator.Worker)
	now := s.cfg.Now()
	for _, w := range ws {
		running, _ := w.Versions["daemon"].(string)
		if w.State == "lost" || running == target {
			delete(sent, w.ID)
			continue
		}
		last, was := sent[w.ID]
		if was && now.Sub(last) < every {
			continue
		}
		sent[w.ID] = now
		if was {
			s.log.Warn("auto-update: the worker still runs another version after its update (refused or rolled back; its daemon's log says which)",
				"worker", w.ID, "version", running, "target", target)
		}
		sums, err := s.releaseSums()
		if err != nil {
			s.log.Error("auto-update: releases unreadable", "err", err)
			return
		}
		rel, err := plane.ReleaseFor(sums, reportedVersions(w.Versions), target)
		if err != nil {
			s.log.Warn("auto-update: worker unreachable", "worker", w.ID, "version", running, "target", target, "err", err)
			continue
		}
		body := operator.UpdateRequest{Version: rel.Version, SHA256: rel.SHA256,
			URL: s.releaseURL(rel.Name)}
		if _, rep, err := s.call(ctx, plane.EnqueueUpdate{WorkerID: w.ID, Body: body}); err == nil && rep.Status == 200 {
			s.log.Info("auto-update sent", "worker", w.ID, "version", running, "target", target, "url", body.URL)
		}
	}
}
