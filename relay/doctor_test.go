//go:build unix

package relay

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func mkfifo(t *testing.T, path string, mode uint32) {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
}

func TestInspectPrefix(t *testing.T) {
	prefix := t.TempDir()
	for _, d := range []string{"good", "half", "shared", "open", "spooler/spool"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mkfifo(t, filepath.Join(prefix, "good", "req.fifo"), 0o600)
	mkfifo(t, filepath.Join(prefix, "good", "resp.fifo"), 0o600)
	mkfifo(t, filepath.Join(prefix, "good", "req.ctl.fifo"), 0o600)
	mkfifo(t, filepath.Join(prefix, "good", "resp.ctl.fifo"), 0o600)
	mkfifo(t, filepath.Join(prefix, "half", "req.fifo"), 0o600)
	mkfifo(t, filepath.Join(prefix, "half", "resp.ctl.fifo"), 0o600)
	mkfifo(t, filepath.Join(prefix, "shared", "req.fifo"), 0o600)
	mkfifo(t, filepath.Join(prefix, "shared", "resp.fifo"), 0o666)
	if err := os.Chmod(filepath.Join(prefix, "open"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "relay-upstream.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(prefix, "escape")); err != nil {
		t.Fatal(err)
	}

	rep, err := InspectPrefix(prefix, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Machines != 4 || rep.Pairs != 2 || rep.Spools != 1 {
		t.Errorf("machines %d, pairs %d, spools %d; want 4, 2, 1", rep.Machines, rep.Pairs, rep.Spools)
	}
	want := []string{
		"half/req.fifo: no resp.fifo beside it",
		"half/resp.ctl.fifo: no req.ctl.fifo beside it",
		"shared/resp.fifo: pipe refused: writable by every user",
		"open: machine directory refused: writable by every user",
		"escape: machine directory refused: resolves outside the prefix",
	}
	all := strings.Join(rep.Problems, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("problems do not say %q:\n%s", w, all)
		}
	}
	if !sort.StringsAreSorted(rep.Problems) {
		t.Errorf("problems are not sorted:\n%s", all)
	}
	if len(rep.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(rep.Problems), len(want), all)
	}

	// Shared writers allowed: the o+w pipe and directory pass.
	rep, err = InspectPrefix(prefix, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Machines != 5 || rep.Pairs != 3 || len(rep.Problems) != 3 {
		t.Errorf("with shared writers: machines %d, pairs %d, problems %q; want 5, 3 and 3 problems", rep.Machines, rep.Pairs, rep.Problems)
	}

	one, err := InspectMachine(filepath.Join(prefix, "good"), false)
	if err != nil || one.Machines != 1 || one.Pairs != 2 || len(one.Problems) != 0 {
		t.Errorf("one good machine: %+v, %v", one, err)
	}
	one, err = InspectMachine(filepath.Join(prefix, "shared")+"/", false)
	if err != nil || one.Pairs != 0 || len(one.Problems) != 1 || !strings.Contains(one.Problems[0], "shared/resp.fifo: pipe refused") {
		t.Errorf("one shared machine: %+v, %v", one, err)
	}
	if _, err := InspectMachine(filepath.Join(prefix, "absent"), false); err == nil {
		t.Error("a machine directory that does not exist was inspected")
	}
	if _, err := InspectPrefix(filepath.Join(prefix, "absent"), false); err == nil {
		t.Error("a prefix that does not exist was inspected")
	}
}

func TestFileLimitForIsTheLeastLimitHoldingEveryPipe(t *testing.T) {
	budget := pipeBudget
	for _, pairs := range []int64{0, 1, 2, 3, 100, 4999, 10000} {
		l := FileLimitFor(pairs)
		if budget(l) < 2*pairs || budget(l-1) >= 2*pairs && pairs > 0 {
			t.Errorf("pairs %d: FileLimitFor %d (budget %d, one less %d)", pairs, l, budget(l), budget(l-1))
		}
	}
	if got := FileLimitFor(10000); got < 27000 || got > 27010 {
		t.Errorf("10,000 pairs: %d, want about 27,000 (README)", got)
	}
}
