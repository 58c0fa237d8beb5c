package runners

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Reaper is a runner whose work can outlive a daemon killed outright in a
// place no process group of the daemon's reaches (a container is
// dockerd's child, not the daemon's). While a run follows that work, it
// records it in its workdir (Follow); Leftovers says how a record the
// earlier daemon left is found and what it names stopped. The daemon
// sweeps them once at start, before its first hello (Registry.Reap), when
// that earlier daemon can no longer report those runs.
type Reaper interface {
	Leftovers() Leftovers
}

// Leftovers is what a Reaper's runs leave in their workdirs and how the
// registry stops it.
type Leftovers struct {
	// File is the record's name in a run's workdir (container.cid,
	// slurm.jobid, pod.ref). Reapers that share it (docker and gvisor
	// are one docker client) are swept once.
	File string
	// Noun names what File names in the log ("container", "slurm job",
	// "Pod").
	Noun string
	// Stop stops what one record names, given the run's workdir and the
	// record's trimmed content. ErrLeftoverGone and ErrNotALeftover are
	// as they say; any other error keeps the record, so the next start
	// tries again, and should carry the command it ran and the id.
	Stop func(ctx context.Context, workdir, content string) error
}

// ReapTimeout bounds the whole sweep of leftovers, every Reaper's
// together: the daemon's first hello waits on it.
const ReapTimeout = 60 * time.Second

// What a Leftovers' Stop reports of a record besides stopping what it
// names.
var (
	// ErrLeftoverGone: what the record names is gone already (it ended,
	// or its client's own cleanup took it); the record is removed quietly.
	ErrLeftoverGone = errors.New("gone already")
	// ErrNotALeftover: the record does not name anything the runner would
	// hand its client; it is left as it is, and logged.
	ErrNotALeftover = errors.New("does not name one")
)

// reapLeftovers sweeps root/*/l.File with l.Stop until ctx ends: a record
// whose work was stopped, or is gone, is removed; the others are logged
// with the id they hold and kept for the next start.
func reapLeftovers(ctx context.Context, root string, l Leftovers, log *slog.Logger) {
	files, err := filepath.Glob(filepath.Join(root, "*", l.File))
	if err != nil || len(files) == 0 {
		return
	}
	for i, f := range files {
		if ctx.Err() != nil {
			log.Warn(l.Noun+"s of earlier daemons' runs not swept before the start went on; tried again at the next start",
				"left", len(files)-i, "file", l.File, "err", context.Cause(ctx))
			return
		}
		b, err := os.ReadFile(f)
		if err != nil {
			log.Warn(l.Noun+" of an earlier daemon's run: record unreadable", "file", f, "err", err)
			continue
		}
		id := strings.TrimSpace(string(b))
		switch err := l.Stop(ctx, filepath.Dir(f), id); {
		case errors.Is(err, ErrNotALeftover):
			log.Warn(l.Noun+" of an earlier daemon's run: record left as it is", "id", id, "file", f, "err", err)
			continue
		case errors.Is(err, ErrLeftoverGone):
		case err != nil:
			log.Warn(l.Noun+" of an earlier daemon's run not stopped; tried again at the next start", "id", id, "file", f, "err", err)
			continue
		default:
			log.Warn(l.Noun+" of an earlier daemon's run still there; stopped", "id", id, "file", f)
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn(l.Noun+" of an earlier daemon's run: record not removed", "id", id, "file", f, "err", err)
		}
	}
}

// Follow records, in workdir/name, what a run follows outside the
// daemon's process groups (a job's id, a Pod's name), so that the next
// daemon stops it if this one is killed outright while it runs.
// With content empty, the run's client writes the record itself
// (docker's --cidfile): Follow only removes one an earlier delivery of
// the run left, which that client refuses to overwrite.
//
// release removes the record once what it names needs no stopping: a run
// that returns without calling it leaves a leftover for the next start.
// It is never nil, even with err set, since a record that failed to be
// written may still be there in part. A record it fails to remove costs
// the next start one quiet miss, so its error is not reported.
func Follow(workdir, name, content string) (release func(), err error) {
	path := filepath.Join(workdir, name)
	release = func() { _ = os.Remove(path) }
	if content == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return release, fmt.Errorf("runners: clear %s: %w", path, err)
		}
		return release, nil
	}
	if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
		return release, fmt.Errorf("runners: record %s: %w", path, err)
	}
	return release, nil
}
