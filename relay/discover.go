//go:build unix

package relay

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// fileKey identifies an inode, to notice a pipe replaced under the same
// name and a machine directory reachable under two names.
type fileKey struct{ dev, ino uint64 }

func keyOf(st *unix.Stat_t) fileKey { return fileKey{uint64(st.Dev), st.Ino} }

// machine is one watched directory of the prefix.
type machine struct {
	name  string           // entry in the prefix
	rel   string           // resolved path relative to the prefix
	key   fileKey          // of the directory
	pumps map[string]*pump // by lane ("" for req.fifo)
	spool bool
}

// The prefix is listed for machine and spool directories made by other
// hosts (inotify reports only this kernel's changes) every rescanPerMachine
// per known machine, within [rescanMin, rescanMax]. Each scan costs a stat
// per machine and garbage the collector then chases through every pump's
// stack, so on 10,000 machines it runs every 30 s rather than every 5 s
// (which cost an idle relay 1% of a core). NFS caches directory attributes
// for up to a minute anyway.
const (
	rescanMin        = 5 * time.Second
	rescanMax        = time.Minute
	rescanPerMachine = 3 * time.Millisecond
)

// rescanPeriod is the time between two rescans of a prefix with machines
// machine directories.
func rescanPeriod(machines int) time.Duration {
	return min(max(time.Duration(machines)*rescanPerMachine, rescanMin), rescanMax)
}

// discovery owns the set of machines and pumps. Only its loop goroutine
// touches it, so it needs no lock.
type discovery struct {
	rl       *Relay
	w        *fsnotify.Watcher
	machines map[string]*machine
	byKey    map[fileKey]string
	// nextRescan is when to scan next for directories that inotify cannot
	// report (created by another host over NFS).
	nextRescan time.Time
	// pending collects the pairs of the first scan (nil after it).
	pending []pendingPair
}

func newDiscovery(rl *Relay) (*discovery, error) {
	// Writes to a FIFO are reported to the directory's watch; a buffer keeps
	// a burst of them from overflowing the kernel's queue.
	w, err := fsnotify.NewBufferedWatcher(4096)
	if err != nil {
		return nil, errors.Join(errors.New("relay: inotify"), err)
	}
	if err := w.Add(rl.root.path); err != nil {
		w.Close()
		return nil, errors.Join(errors.New("relay: watch "+rl.root.path), err)
	}
	return &discovery{rl: rl, w: w, machines: map[string]*machine{}, byKey: map[fileKey]string{},
		nextRescan: time.Now().Add(rescanMin)}, nil
}

func (d *discovery) close() { d.w.Close() }

func (d *discovery) allPumps() []*pump {
	var ps []*pump
	for _, m := range d.machines {
		for _, p := range m.pumps {
			ps = append(ps, p)
		}
	}
	return ps
}

// scanAll reads the prefix: new machines are added, known ones rescanned,
// vanished ones removed. It runs at start and after an inotify overflow.
func (d *discovery) scanAll() {
	ents, err := d.rl.root.readDir(".")
	if err != nil {
		d.rl.log.Error("relay: scan prefix", "err", err)
		return
	}
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		seen[e.Name()] = true
		d.addMachine(e.Name())
	}
	for name := range d.machines {
		if !seen[name] {
			d.removeMachine(name)
		}
	}
}

// rescanSpool finds machine directories and spool directories that another
// host created: inotify reports only this kernel's changes.
func (d *discovery) rescanSpool() {
	ents, err := d.rl.root.readDir(".")
	if err != nil {
		return
	}
	for _, e := range ents {
		m := d.machines[e.Name()]
		if m == nil {
			d.addMachine(e.Name())
			continue
		}
		if !m.spool {
			if _, err := d.rl.root.lstat(m.rel + "/spool/req"); err == nil {
				d.addSpool(m)
			}
		}
	}
}

func (d *discovery) handle(ev fsnotify.Event) {
	// Every write to a FIFO is reported as a Write of its directory's
	// watch; only appearing and vanishing names matter here.
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		return
	}
	dir, name := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	switch {
	case ev.Name == d.rl.root.path:
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			d.rl.log.Error("relay: the prefix itself was removed or renamed", "prefix", ev.Name)
		}
	case dir == d.rl.root.path:
		switch {
		case ev.Has(fsnotify.Create):
			d.addMachine(name)
		case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
			d.removeMachine(name)
		}
	case filepath.Dir(dir) == d.rl.root.path:
		if m := d.machines[filepath.Base(dir)]; m != nil {
			d.fileEvent(m, name, ev)
		}
	}
}

func (d *discovery) fileEvent(m *machine, name string, ev fsnotify.Event) {
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	if name == "spool" {
		switch {
		case ev.Has(fsnotify.Create):
			d.addSpool(m)
		case gone:
			d.removeSpool(m)
		}
		return
	}
	kind, lane, ok := parsePipeName(name)
	switch {
	case !ok:
	case ev.Has(fsnotify.Create):
		if p := m.pumps[lane]; p != nil && kind == "resp" {
			// A resp pipe renamed over the one the pump holds: the pump's
			// descriptor still names the old pipe, which nobody will read.
			p.respStale.Store(true)
			d.rl.metrics.respReplaced.Add(1)
		}
		d.ensurePair(m, lane)
	case gone:
		d.stopPair(m, lane)
	}
}

// addMachine admits a prefix entry as a machine directory (or rescans a
// known one): resolved beneath the prefix, not shared-writable, watched,
// then listed so that pipes created before the watch are not missed.
func (d *discovery) addMachine(name string) {
	if m := d.machines[name]; m != nil {
		d.scanMachine(m)
		return
	}
	rel, st, err := d.rl.root.machineDir(name)
	if err != nil {
		if errors.Is(err, errEscape) {
			d.rl.metrics.fail(errPipeRefused)
			d.rl.log.Warn("relay: machine directory refused", "err", err)
		}
		return // not a directory, or gone already
	}
	full := filepath.Join(d.rl.root.path, name)
	if err := checkMode(&st, unix.S_IFDIR, d.rl.cfg.AllowSharedWriters, full); err != nil {
		d.rl.metrics.fail(errPipeRefused)
		d.rl.log.Warn("relay: machine directory refused", "err", err)
		return
	}
	key := keyOf(&st)
	if other, dup := d.byKey[key]; dup {
		d.rl.log.Warn("relay: machine directory is another name of one already pumped", "dir", full, "same_as", other)
		return
	}
	if err := d.w.Add(full); err != nil {
		d.rl.log.Warn("relay: watch machine directory", "dir", full, "err", err)
		return
	}
	m := &machine{name: name, rel: rel, key: key, pumps: map[string]*pump{}}
	d.machines[name] = m
	d.byKey[key] = name
	d.rl.metrics.machines.Add(1)
	d.scanMachine(m)
}

// scanMachine lists a machine directory: every req*.fifo gets a pump (or
// waits for its resp*.fifo), a spool directory is polled, and pumps whose
// pipe vanished stop.
func (d *discovery) scanMachine(m *machine) {
	ents, err := d.rl.root.readDir(m.rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			d.removeMachine(m.name)
		}
		return
	}
	lanes := make(map[string]bool, len(ents))
	for _, e := range ents {
		if e.Name() == "spool" && e.IsDir() {
			d.addSpool(m)
		}
		if kind, lane, ok := parsePipeName(e.Name()); ok && kind == "req" {
			lanes[lane] = true
			d.ensurePair(m, lane)
		}
	}
	for lane := range m.pumps {
		if !lanes[lane] {
			d.stopPair(m, lane)
		}
	}
}

func (d *discovery) removeMachine(name string) {
	m := d.machines[name]
	if m == nil {
		return
	}
	for lane := range m.pumps {
		d.stopPair(m, lane)
	}
	d.removeSpool(m)
	_ = d.w.Remove(filepath.Join(d.rl.root.path, name)) // already gone when the directory was deleted
	delete(d.machines, name)
	delete(d.byKey, m.key)
	d.rl.metrics.machines.Add(-1)
}

// ensurePair starts the pump of lane when both its pipes exist and pass the
// checks. A req pipe whose resp pipe is missing waits for the event that
// creates it. A running pump whose req pipe was replaced is restarted.
func (d *discovery) ensurePair(m *machine, lane string) {
	reqRel, respRel := m.rel+"/"+pipeName("req", lane), m.rel+"/"+pipeName("resp", lane)
	if p := m.pumps[lane]; p != nil {
		st, err := d.rl.root.lstat(reqRel)
		if err == nil && keyOf(&st) == p.key && !p.exited() {
			return
		}
		d.stopPair(m, lane)
	}
	st, err := d.rl.root.lstat(respRel)
	if err != nil {
		return // the resp pipe's creation event will come back here
	}
	if err := checkMode(&st, unix.S_IFIFO, d.rl.cfg.AllowSharedWriters, filepath.Join(d.rl.root.path, respRel)); err != nil {
		d.refused(err)
		return
	}
	if d.pending != nil {
		d.pending = append(d.pending, pendingPair{m, lane})
		return
	}
	d.startPair(m, lane, 1)
}

// pendingPair is a pair found by the first scan, started after it.
type pendingPair struct {
	m    *machine
	lane string
}

// startPending starts the pairs the first scan found. Their request pipes
// come first in the pipe budget: a reply pipe is held for as many pairs
// as fit once every request pipe is counted, so a relay started on more
// pairs than its budget holds still pumps every one of them.
func (d *discovery) startPending() {
	pending := d.pending
	d.pending = nil
	for i, pp := range pending {
		d.startPair(pp.m, pp.lane, int64(len(pending)-i))
	}
}

// startPair opens lane's pipes and starts its pump. Both pipes are opened
// O_RDWR|O_NONBLOCK, resp first, as docs/protocol.md ("What a daemon can rely
// on") has it: open(2) never waits for the daemon's end, and a daemon's plain
// blocking open of either pipe returns at once, in either order. resp is held
// only while the budget has room for it beside uncounted request pipes (this
// one and those still to start). Nothing is written to resp here: every frame
// on it is the answer to a request read from req.
func (d *discovery) startPair(m *machine, lane string, uncounted int64) {
	reqRel, respRel := m.rel+"/"+pipeName("req", lane), m.rel+"/"+pipeName("resp", lane)
	resp := -1
	if d.rl.reserveReplyFD(uncounted) {
		rfd, _, err := d.rl.root.openChecked(respRel, unix.O_RDWR|unix.O_NONBLOCK, unix.S_IFIFO, d.rl.cfg.AllowSharedWriters)
		if err != nil {
			d.rl.replyFDs.Add(-1)
			if !errors.Is(err, fs.ErrNotExist) {
				d.refused(err)
			}
			return
		}
		resp = rfd
	} else {
		d.rl.replyPipeUnheld(respRel)
	}
	fd, st, err := d.rl.root.openChecked(reqRel, unix.O_RDWR|unix.O_NONBLOCK, unix.S_IFIFO, d.rl.cfg.AllowSharedWriters)
	if err != nil {
		if resp >= 0 {
			unix.Close(resp)
			d.rl.replyFDs.Add(-1)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			d.refused(err)
		}
		return
	}
	p := newPump(d.rl, fd, keyOf(&st), reqRel, respRel, resp)
	m.pumps[lane] = p
	d.rl.pumps.Add(1)
	d.rl.metrics.pumps.Add(1)
	go p.run()
}

func (d *discovery) refused(err error) {
	d.rl.metrics.fail(errPipeRefused)
	d.rl.log.Warn("relay: pipe refused", "err", err)
}

func (d *discovery) stopPair(m *machine, lane string) {
	if p := m.pumps[lane]; p != nil {
		p.kill()
		delete(m.pumps, lane)
	}
}

func (d *discovery) addSpool(m *machine) {
	if m.spool {
		return
	}
	m.spool = true
	d.rl.spool.add(m.name, m.rel)
	d.rl.metrics.spoolDirs.Add(1)
}

func (d *discovery) removeSpool(m *machine) {
	if !m.spool {
		return
	}
	m.spool = false
	d.rl.spool.remove(m.name)
	d.rl.metrics.spoolDirs.Add(-1)
}

// parsePipeName recognises req.fifo / resp.fifo (lane "") and
// req.<lane>.fifo / resp.<lane>.fifo.
func parsePipeName(name string) (kind, lane string, ok bool) {
	rest, found := strings.CutSuffix(name, ".fifo")
	if !found {
		return "", "", false
	}
	kind, lane, _ = strings.Cut(rest, ".")
	if kind != "req" && kind != "resp" {
		return "", "", false
	}
	if lane == "" && strings.Contains(rest, ".") || !validLane(lane) {
		return "", "", false
	}
	return kind, lane, true
}

func validLane(lane string) bool {
	if len(lane) > 64 {
		return false
	}
	for i := 0; i < len(lane); i++ {
		c := lane[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func pipeName(kind, lane string) string {
	if lane == "" {
		return kind + ".fifo"
	}
	return kind + "." + lane + ".fifo"
}

// loop handles inotify events and the spool ticks until ctx is done.
func (d *discovery) loop(ctx context.Context) {
	tick := time.NewTicker(d.rl.cfg.SpoolInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-d.w.Events:
			if !ok {
				return
			}
			d.handle(ev)
		case err, ok := <-d.w.Errors:
			if !ok {
				return
			}
			d.rl.log.Warn("relay: inotify; rescanning the prefix", "err", err)
			d.scanAll()
		case now := <-tick.C:
			d.rl.spool.poll(d.rl)
			d.rl.idle.tick(now, d.rl.metrics.frames.Load())
			if !now.Before(d.nextRescan) {
				d.rescanSpool()
				d.nextRescan = time.Now().Add(rescanPeriod(len(d.machines)))
			}
		}
	}
}
