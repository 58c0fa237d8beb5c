package childpids

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"syscall"
)

// procStat is what Reap reads of /proc/<pid>/stat.
type procStat struct {
	state   byte   // field 3: R, S, D, Z (zombie), X (dead), …
	pgrp    int    // field 5
	session int    // field 6
	start   uint64 // field 22, clock ticks after boot
}

// exited reports a process that runs nothing: a zombie not yet reaped by
// whoever inherited it, or one being torn down.
func (s procStat) exited() bool { return s.state == 'Z' || s.state == 'X' }

// readStat parses /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself, so the fields
// are counted from the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	st := procStat{state: f[0][0]}
	if st.pgrp, err = strconv.Atoi(string(f[2])); err == nil {
		if st.session, err = strconv.Atoi(string(f[3])); err == nil {
			st.start, err = strconv.ParseUint(string(f[19]), 10, 64)
		}
	}
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

func image(pid int) (string, error) { return os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe") }

// bootID is the kernel's id of this boot, empty when unreadable.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// describe reads the record of the child pid. A child that already exited
// (a zombie until it is waited for) has no image; its record is still
// written, so its group's members are covered until it is reaped.
func describe(pid int) (Record, error) {
	st, err := readStat(pid)
	if err != nil {
		return Record{}, err
	}
	if st.pgrp != pid {
		return Record{}, fmt.Errorf("process group %d: the child does not lead its own group", st.pgrp)
	}
	img, _ := image(pid)
	return Record{PID: pid, PGID: st.pgrp, SID: st.session, Start: st.start, Image: img}, nil
}

// inspect decides what rec names now. Its verdict is Stopped only when
// members of the child's group remain, and those are in Members.
func (d *Dir) inspect(rec Record, owned func(string) bool) Reaped {
	if rec.PID <= 1 || rec.PGID != rec.PID || rec.PID == os.Getpid() || rec.PGID == syscall.Getpgrp() {
		return Reaped{Verdict: Refused}
	}
	if rec.Boot != "" && d.boot != "" && rec.Boot != d.boot {
		return Reaped{Verdict: Rebooted}
	}
	// The child itself: gone (the parent-death signal killed it), a
	// zombie, still running, or its pid held by another process. A stat
	// unreadable for another reason leaves the members to decide.
	var img string
	st, err := readStat(rec.PID)
	switch {
	case err == nil && st.start != rec.Start:
		// A pid is not handed out while a group of that number has
		// members, so the child's group is empty.
		return Reaped{Verdict: Reused}
	case err == nil && !st.exited():
		img, _ = image(rec.PID)
		if owned == nil {
			owned = func(live string) bool { return live == rec.Image }
		}
		if img == "" || !owned(img) {
			return Reaped{Verdict: NotOwned, Image: img}
		}
	}
	members := liveMembers(rec)
	if len(members) == 0 {
		return Reaped{Verdict: Gone}
	}
	return Reaped{Verdict: Stopped, Image: img, Members: members}
}

// liveMembers lists the running processes of rec's group that are of the
// child's making: in its session (setsid would have left the group) and
// started no earlier than the child. Zombies run nothing and are left out.
func liveMembers(rec Record) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.exited() || st.pgrp != rec.PGID || st.session != rec.SID || st.start < rec.Start {
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}
