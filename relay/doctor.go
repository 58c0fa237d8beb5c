//go:build unix

package relay

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// InspectPrefix reads the prefix as the relay's discovery does, without
// opening a pipe: a machine directory must resolve beneath the prefix
// and pass the shared-writer rule; each req*.fifo needs its resp*.fifo
// (and a resp its req), both FIFOs that pass the same rule. An error is
// a prefix that cannot be opened or listed.
func InspectPrefix(prefix string, allowSharedWriters bool) (PrefixReport, error) {
	rt, err := openRoot(prefix)
	if err != nil {
		return PrefixReport{}, err
	}
	defer rt.close()
	rep := PrefixReport{Path: rt.path}
	ents, err := rt.readDir(".")
	if err != nil {
		return rep, err
	}
	seen := map[fileKey]bool{}
	for _, e := range ents {
		rel, st, err := rt.machineDir(e.Name())
		if err != nil {
			if errors.Is(err, errEscape) {
				rep.problem(filepath.Join(rt.path, e.Name()), "machine directory refused", err)
			}
			continue // not a directory: relay-upstream.json, the lock
		}
		if err := checkMode(&st, unix.S_IFDIR, allowSharedWriters, filepath.Join(rt.path, e.Name())); err != nil {
			rep.problem(filepath.Join(rt.path, e.Name()), "machine directory refused", err)
			continue
		}
		if seen[keyOf(&st)] {
			continue // another name of a directory already counted
		}
		seen[keyOf(&st)] = true
		rep.Machines++
		rep.inspectMachine(rt, rel, allowSharedWriters)
	}
	sort.Strings(rep.Problems)
	return rep, nil
}

// InspectMachine is InspectPrefix for one machine directory, dir, as a
// daemon behind the relay sees it ([server] relay_dir): its prefix is
// the directory above.
func InspectMachine(dir string, allowSharedWriters bool) (PrefixReport, error) {
	rt, err := openRoot(filepath.Dir(filepath.Clean(dir)))
	if err != nil {
		return PrefixReport{}, err
	}
	defer rt.close()
	rep := PrefixReport{Path: rt.path}
	name := filepath.Base(filepath.Clean(dir))
	rel, st, err := rt.machineDir(name)
	if err != nil {
		return rep, err
	}
	if err := checkMode(&st, unix.S_IFDIR, allowSharedWriters, filepath.Join(rt.path, name)); err != nil {
		rep.problem(filepath.Join(rt.path, name), "machine directory refused", err)
		return rep, nil
	}
	rep.Machines = 1
	rep.inspectMachine(rt, rel, allowSharedWriters)
	sort.Strings(rep.Problems)
	return rep, nil
}

func (rep *PrefixReport) inspectMachine(rt *root, rel string, allowShared bool) {
	ents, err := rt.readDir(rel)
	if err != nil {
		rep.problem(filepath.Join(rt.path, rel), "machine directory unreadable", err)
		return
	}
	lanes := map[string][2]bool{} // lane → {req seen, resp seen}
	for _, e := range ents {
		if e.Name() == "spool" && e.IsDir() {
			rep.Spools++
		}
		kind, lane, ok := parsePipeName(e.Name())
		if !ok {
			continue
		}
		got := lanes[lane]
		if kind == "req" {
			got[0] = true
		} else {
			got[1] = true
		}
		lanes[lane] = got
	}
	for lane, got := range lanes {
		req, resp := rel+"/"+pipeName("req", lane), rel+"/"+pipeName("resp", lane)
		switch {
		case !got[1]:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: no %s beside it: the pair is not pumped", filepath.Join(rt.path, req), pipeName("resp", lane)))
			continue
		case !got[0]:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: no %s beside it: the pair is not pumped", filepath.Join(rt.path, resp), pipeName("req", lane)))
			continue
		}
		ok := true
		for _, p := range []string{resp, req} {
			st, err := rt.lstat(p)
			if err == nil {
				err = checkMode(&st, unix.S_IFIFO, allowShared, filepath.Join(rt.path, p))
			}
			if err != nil {
				rep.problem(filepath.Join(rt.path, p), "pipe refused", err)
				ok = false
			}
		}
		if ok {
			rep.Pairs++
		}
	}
}

// problem records what the relay would refuse at path. err is the
// relay's own error, which names the path too: only its cause is kept.
func (rep *PrefixReport) problem(path, what string, err error) {
	if cause := errors.Unwrap(err); cause != nil {
		err = cause
	}
	rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %s: %v", path, what, err))
}

// FileBudget is this process's open-file limit and the pipe budget the
// relay derives from it (three quarters of the limit, less what it
// reserves for everything else); ok is false when the limit is unknown
// or unlimited.
func FileBudget() (limit, budget int64, ok bool) {
	limit, ok = openFileLimit()
	if !ok {
		return 0, 0, false
	}
	return limit, keptPipeBound(), true
}
