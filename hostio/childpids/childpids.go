package childpids

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nymphd/nymph/hostio/procgroup"
	"github.com/nymphd/nymph/hostio/secretfile"
)

// MaxFileSize bounds a PID file read back. A record is under 200 bytes;
// anything larger is not one.
const MaxFileSize = 4 << 10

// DefaultGrace is how long the groups Reap stopped with SIGTERM have to
// exit before SIGKILL.
const DefaultGrace = 2 * time.Second

// fileSuffix ends the name of every PID file; a name starting with "."
// and ending in ".tmp" is a write that never reached its rename.
const fileSuffix = ".json"

// Record is one PID file.
type Record struct {
	// PID is the child's; PGID its process group, which it leads (PGID
	// equals PID); SID its session, which every member of the group
	// shares.
	PID  int `json:"pid"`
	PGID int `json:"pgid,omitempty"`
	SID  int `json:"sid,omitempty"`
	// Start is when the child started, in clock ticks after boot (field
	// 22 of /proc/<pid>/stat): with PID, it names one process of one boot.
	Start uint64 `json:"start,omitempty"`
	// Image is the program the child ran when it was recorded
	// (/proc/<pid>/exe), empty when it had already exited.
	Image string `json:"image,omitempty"`
	// Boot is the kernel's boot id (/proc/sys/kernel/random/boot_id):
	// a file of an earlier boot names nothing that still runs.
	Boot string `json:"boot,omitempty"`
}

// Dir is a directory of PID files. A nil *Dir records nothing: Add
// returns a remove that does nothing, and Reap finds nothing.
type Dir struct {
	path  string
	boot  string
	grace time.Duration
}

// Open makes path a private directory (0700, created with its parents
// when absent) and returns it. Files left in it are Reap's.
func Open(path string) (*Dir, error) {
	if err := secretfile.EnsureDir("child PID directory", path); err != nil {
		return nil, fmt.Errorf("childpids: %w", err)
	}
	return &Dir{path: path, boot: bootID(), grace: DefaultGrace}, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// Add records the child pid, started (cmd.Start returned) and not yet
// waited for, so that its process group cannot be reused under the file
// while it exists. remove deletes the file; call it once the child is
// reaped. On error nothing was written, remove does nothing, and the
// child runs unrecorded: a daemon that dies would leave its group behind.
func (d *Dir) Add(pid int) (remove func() error, err error) {
	nothing := func() error { return nil }
	if d == nil {
		return nothing, nil
	}
	rec, err := describe(pid)
	if err != nil {
		return nothing, fmt.Errorf("childpids: record pid %d: %w", pid, err)
	}
	rec.Boot = d.boot
	data, err := json.Marshal(rec)
	if err != nil {
		return nothing, fmt.Errorf("childpids: record pid %d: %w", pid, err)
	}
	path := filepath.Join(d.path, fmt.Sprintf("%d-%d%s", pid, rec.Start, fileSuffix))
	if err := writeNew(path, data); err != nil {
		return nothing, fmt.Errorf("childpids: record pid %d: %w", pid, err)
	}
	return func() error {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("childpids: forget pid %d: %w", pid, err)
		}
		return nil
	}, nil
}

// writeNew puts data at path through a temporary file beside it and a
// rename, so Reap never reads a part of a record. Unlike
// secretfile.WriteFile it syncs nothing: a file only has to outlive the
// daemon, not the machine, whose loss ends the children as well, and the
// two syncs would cost every exec about as much as the rest of its
// overhead.
func writeNew(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Verdict is what Reap made of one file.
type Verdict string

const (
	// Stopped: the child's group still had members; they were sent
	// SIGTERM and, when still there after the grace, SIGKILL.
	Stopped Verdict = "stopped"
	// Gone: nothing of the child's group runs any more.
	Gone Verdict = "gone"
	// Reused: the pid is now another process (another start time), so
	// the child's group has ended; nothing was signalled.
	Reused Verdict = "pid reused"
	// NotOwned: the child itself still runs, but an image the caller does
	// not own; it was left running.
	NotOwned Verdict = "image not owned"
	// Rebooted: the file was written before the machine last booted.
	Rebooted Verdict = "written before the last boot"
	// Refused: the file names what is never signalled: a pid of 1 or
	// less, the daemon's own process group, or a child that did not lead
	// its own group.
	Refused Verdict = "refused"
	// Malformed: the file is no record (too large, not JSON, no pid).
	Malformed Verdict = "malformed"
	// Unverified: this system offers no way to tell the child from a
	// process that reused its pid; it was left running.
	Unverified Verdict = "unverified"
)

// Reaped is one file Reap handled; every such file has been removed.
type Reaped struct {
	File    string // the file's name in the directory
	Record  Record // zero when Malformed
	Verdict Verdict
	// Image is what the child ran when Reap found it still running
	// (NotOwned, or Stopped with the child among the members).
	Image string
	// Members are the processes of the group Reap found (Stopped).
	Members []int
	// Killed reports that members outlived the grace and got SIGKILL.
	Killed bool
}

// Reap handles every file left in the directory, as a daemon starting
// must before it spawns anything: a file whose child's group still has
// members is stopped (SIGTERM to the group, up to the grace, SIGKILL);
// one whose group is gone, whose pid now names another process, or which
// is malformed, is removed without signalling anything. The log says which
// case each file was, and so do the results. The groups are stopped
// together; ctx ending cuts their grace short (SIGKILL at once).
//
// owned decides whether a child still running (not only members of its
// group) runs an image the daemon owns; nil means the image recorded when
// it started, exactly. Members whose leader has exited are judged by their
// session and start time alone: they run whatever the child started.
func (d *Dir) Reap(ctx context.Context, log *slog.Logger, owned func(image string) bool) []Reaped {
	if d == nil {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	entries, err := os.ReadDir(d.path)
	if err != nil {
		log.Warn("child PID directory unreadable; stale children not looked for", "dir", d.path, "err", err)
		return nil
	}
	var out []Reaped
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(d.path, name)
		if strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") {
			// A record cut short before its rename: its child was never
			// recorded, and nothing here names it.
			d.remove(log, path)
			continue
		}
		if !e.Type().IsRegular() {
			log.Warn("not a PID file; left alone", "path", path, "type", e.Type().String())
			continue
		}
		rec, err := readRecord(path)
		if err != nil {
			out = append(out, Reaped{File: name, Verdict: Malformed})
			log.Warn("malformed PID file removed", "path", path, "err", err)
			continue
		}
		r := d.inspect(rec, owned)
		r.File, r.Record = name, rec
		out = append(out, r)
	}
	d.stopGroups(ctx, out)
	for _, r := range out {
		d.remove(log, filepath.Join(d.path, r.File))
		logReaped(log, d.path, r)
	}
	return out
}

func (d *Dir) remove(log *slog.Logger, path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("cannot remove PID file", "path", path, "err", err)
	}
}

// stopGroups stops every Stopped group at once: SIGTERM to each, then
// SIGKILL to each that still has members once the grace or ctx ends.
func (d *Dir) stopGroups(ctx context.Context, rs []Reaped) {
	var pending []*Reaped
	for i := range rs {
		if rs[i].Verdict == Stopped {
			pending = append(pending, &rs[i])
			_ = procgroup.Signal(rs[i].Record.PGID, syscall.SIGTERM)
		}
	}
	if len(pending) == 0 {
		return
	}
	grace := time.NewTimer(d.grace)
	defer grace.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		// Asked of the group's members again rather than of the group
		// number: once they are gone the number may name another group.
		left := pending[:0]
		for _, r := range pending {
			if len(liveMembers(r.Record)) > 0 {
				left = append(left, r)
			}
		}
		pending = left
		if len(pending) == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-grace.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	for _, r := range pending {
		if len(liveMembers(r.Record)) > 0 {
			r.Killed = true
			_ = procgroup.Signal(r.Record.PGID, syscall.SIGKILL)
		}
	}
}

func logReaped(log *slog.Logger, dir string, r Reaped) {
	rec := r.Record
	attrs := []any{"file", filepath.Join(dir, r.File), "pid", rec.PID, "pgid", rec.PGID}
	switch r.Verdict {
	case Malformed:
		// Logged when read.
	case Stopped:
		log.Warn("child of an earlier daemon still running; its process group stopped",
			append(attrs, "image", rec.Image, "members", r.Members, "sigkill", r.Killed)...)
	case Gone:
		log.Info("PID file of an earlier daemon removed: its process group has exited", attrs...)
	case Reused:
		log.Info("PID file of an earlier daemon removed: its pid now names another process; nothing signalled",
			append(attrs, "image", rec.Image)...)
	case Rebooted:
		log.Info("PID file removed: written before the machine last booted", attrs...)
	case NotOwned:
		log.Warn("PID file removed: its child still runs, but not an image this daemon owns; left running",
			append(attrs, "recorded_image", rec.Image, "image", r.Image)...)
	case Refused:
		log.Warn("PID file removed: it names a process never signalled (pid 1 or less, the daemon's own group, or no group leader)", attrs...)
	case Unverified:
		log.Warn("PID file removed: this system cannot tell the child from a process reusing its pid; left running", attrs...)
	}
}

// readRecord reads one PID file, refusing more than MaxFileSize bytes.
func readRecord(path string) (Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return Record{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return Record{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return Record{}, fmt.Errorf("read %s: larger than %d bytes, not a PID file", path, MaxFileSize)
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("read %s: %w", path, err)
	}
	if rec.PID == 0 {
		return Record{}, fmt.Errorf("read %s: no pid", path)
	}
	return rec, nil
}
