package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
	"github.com/nymphd/nymph/hostio/opclient"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

// updatePollEvery is how often ctl update --wait looks at the workers.
const updatePollEvery = time.Second

// ctlUpdate queues an ota_update on one worker or on all of them. Without
// --url the server derives the url and sha256 for each worker from its
// --releases directory and the worker's platform (the latest version when
// --version is not given). With --wait (the default for --all) it waits
// for each worker to come back and reports: updated, rolled back, not
// updated (it took the update and runs on: refused or still downloading),
// unreachable (it never polled for it, or is lost).
func ctlUpdate(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("update")
	all := fs.Bool("all", false, "update every worker that is not lost")
	version := fs.String("version", "", "the version to install (default: the latest in serve's --releases)")
	url := fs.String("url", "", "where the worker downloads the binary (default: serve's --releases)")
	sum := fs.String("sha256", "", "the binary's sha256, 64 hex characters (with --url)")
	wait := fs.Duration("wait", -1, "how long to wait for the workers to come back with the version (default: 5m with --all, none for one worker)")
	want := 1
	if len(args) > 0 && (args[0] == "--all" || args[0] == "-all") {
		want = 0
	}
	pos, _, st := c.prepare("update", fs, args, want, false)
	if st >= 0 {
		return st
	}
	if *all == (len(pos) > 0) {
		return c.usageErr("update", "name one WORKER or --all")
	}
	req := operator.UpdateRequest{Version: *version}
	if *url != "" || *sum != "" {
		if !strings.HasPrefix(*url, "https://") && !strings.HasPrefix(*url, "http://") {
			return c.usageErr("update", "--url must be an http(s) URL, got %q", *url)
		}
		if err := checkSHA256(*sum); err != nil {
			return c.usageErr("update", "--sha256 %v", err)
		}
		if *version == "" {
			return c.usageErr("update", "--version is required with --url")
		}
		req.URL, req.SHA256 = *url, strings.ToLower(*sum)
	}
	if *wait < 0 {
		*wait = 0
		if *all {
			*wait = 5 * time.Minute
		}
	}
	var targets []string
	if *all {
		var err error
		if targets, err = c.reachableWorkers(ctx); err != nil {
			return c.fail(err)
		}
		if len(targets) == 0 {
			termtext.Fprintf(c.env.stderr, "nymph ctl: no workers to update\n")
			return 1
		}
	} else {
		id, st := c.worker(ctx, pos[0])
		if st >= 0 {
			return st
		}
		targets = []string{id}
	}
	outcomes := map[string]string{}
	queued := map[string]string{} // worker → version it was sent
	for _, id := range targets {
		acc, err := c.client.Update(ctx, id, req)
		var se *opclient.APIError
		switch {
		case errors.As(err, &se) && se.Status == 409 && !*all:
			termtext.Fprintf(c.env.stderr, "nymph ctl: update: worker %s: %s\n", id, se.Message)
			return 1
		case errors.As(err, &se) && se.Status == 409:
			outcomes[id] = se.Message
		case err != nil && !*all:
			return c.fail(err)
		case err != nil:
			outcomes[id] = "not queued: " + err.Error()
		default:
			queued[id] = acc.Version
			termtext.Fprintf(c.env.stdout, "queued ota_update %s for worker %s (version %s)\n", acc.CommandID, acc.WorkerID, acc.Version)
		}
	}
	if *wait > 0 && len(queued) > 0 {
		waitUpdated(ctx, c, queued, outcomes, *wait)
	}
	failed := 0
	for _, id := range targets {
		o, done := outcomes[id]
		if !done {
			continue // queued, not waited for
		}
		if !strings.HasPrefix(o, "updated") {
			failed++
		}
		termtext.Fprintf(c.env.stdout, "%s: %s\n", id, o)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// reachableWorkers are the ids of every worker that is not lost: what a
// verb's --all reaches.
func (c *ctlRun) reachableWorkers(ctx context.Context) ([]string, error) {
	ws, err := c.client.Workers(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, w := range ws {
		if w.State != "lost" {
			ids = append(ids, w.ID)
		}
	}
	return ids, nil
}

// waitUpdated waits until every queued worker has settled the update it
// was sent (updated, or back on another version: rolled back), or wait
// passes, and records each one's outcome from what serve saw.
func waitUpdated(ctx context.Context, c *ctlRun, queued, outcomes map[string]string, wait time.Duration) {
	deadline := time.Now().Add(wait)
	last := map[string]operator.Worker{}
	for {
		ws, err := c.client.Workers(ctx)
		if err == nil {
			for _, w := range ws {
				want, ok := queued[w.ID]
				if !ok {
					continue
				}
				last[w.ID] = w
				if o, settled := updateSettled(w, want); settled {
					outcomes[w.ID] = o
					delete(queued, w.ID)
				}
			}
		}
		if len(queued) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(updatePollEvery):
		}
	}
	for id, want := range queued {
		outcomes[id] = updateUnsettled(last[id], want, wait)
	}
}

// updateSettled says how w ended the update to want, if it has.
func updateSettled(w operator.Worker, want string) (string, bool) {
	running, _ := w.Versions["daemon"].(string)
	u := w.Update
	switch {
	case running == want:
		return "updated to " + want, true
	case u != nil && u.Version == want && u.State == plane.UpdateRolledBack:
		return fmt.Sprintf("rolled back: came back on %s instead of %s (its daemon's log says why)", u.Running, want), true
	}
	return "", false
}

// updateUnsettled words an update not settled within wait.
func updateUnsettled(w operator.Worker, want string, wait time.Duration) string {
	running, _ := w.Versions["daemon"].(string)
	switch {
	case w.State == "lost":
		return fmt.Sprintf("unreachable: the worker is lost (it runs %s)", running)
	case w.Update == nil || w.Update.Version != want || w.Update.State == plane.UpdateQueued:
		return fmt.Sprintf("unreachable: the worker did not poll for the update within %v (it runs %s)", wait, running)
	}
	return fmt.Sprintf("not updated: the worker took the update but still runs %s, not %s, after %v (it refused it or is still downloading: its daemon's log says which)", running, want, wait)
}
