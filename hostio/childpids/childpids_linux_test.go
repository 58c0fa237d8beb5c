package childpids

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/procgroup"
)

// crashDirEnv makes the test binary a daemon that records one child and
// waits to be killed (TestMain).
const crashDirEnv = "CHILDPIDS_TEST_CRASH_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		os.Exit(recordAndWait(dir))
	}
	os.Exit(m.Run())
}

// recordAndWait runs as a daemon would: `bash -c` in its own group with
// the parent-death signal, a member `sleep` started by it, the child
// recorded in dir. It prints "<child> <member>" and waits to be killed.
func recordAndWait(dir string) int {
	d, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cmd := exec.Command("bash", "-c", `sleep 300 </dev/null >/dev/null 2>&1 & echo $!; wait`)
	cmd.SysProcAttr = procgroup.Attr()
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := d.Add(cmd.Process.Pid); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var member int
	if _, err := fmt.Fscan(out, &member); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%d %d\n", cmd.Process.Pid, member)
	select {}
}

func needBash(t *testing.T) {
	t.Helper()
	for _, p := range []string{"bash", "sleep"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s not found: %v", p, err)
		}
	}
}

// running reports whether pid runs something: not gone, not a zombie.
func running(pid int) bool {
	st, err := readStat(pid)
	return err == nil && !st.exited()
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !running(pid) {
			return
		}
	}
	t.Fatalf("process %d still runs", pid)
}

// startGroup starts bash -c script as the leader of its own group,
// without the parent-death signal (the test plays the daemon that died),
// and returns it once the script printed the pid of the member it started.
func startGroup(t *testing.T, script string) (cmd *exec.Cmd, member int) {
	t.Helper()
	cmd = exec.Command("bash", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if _, err := fmt.Fscan(out, &member); err != nil {
		t.Fatalf("script did not start: %v", err)
	}
	return cmd, member
}

func openDir(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "pids"))
	if err != nil {
		t.Fatal(err)
	}
	d.grace = 300 * time.Millisecond
	return d
}

func files(t *testing.T, d *Dir) []string {
	t.Helper()
	entries, err := os.ReadDir(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// onlyFile reads the one record in d.
func onlyFile(t *testing.T, d *Dir) (string, Record) {
	t.Helper()
	names := files(t, d)
	if len(names) != 1 {
		t.Fatalf("files in %s: %q, want one", d.Path(), names)
	}
	path := filepath.Join(d.Path(), names[0])
	rec, err := readRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, rec
}

func writeRecord(t *testing.T, path string, rec Record) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// reapOne reaps d, which must hold one file, and checks it is gone after.
func reapOne(t *testing.T, d *Dir, owned func(string) bool) (Reaped, string) {
	t.Helper()
	var logged bytes.Buffer
	got := d.Reap(context.Background(), slog.New(slog.NewTextHandler(&logged, nil)), owned)
	if len(got) != 1 {
		t.Fatalf("Reap = %+v, want one file; log:\n%s", got, logged.String())
	}
	if left := files(t, d); len(left) != 0 {
		t.Errorf("files left after Reap: %q", left)
	}
	return got[0], logged.String()
}

func TestReapStopsTheGroupADaemonKilledOutrightLeftBehind(t *testing.T) {
	needBash(t)
	dir := filepath.Join(t.TempDir(), "pids")
	daemon := exec.Command(os.Args[0], "-test.run=^$")
	daemon.Env = append(os.Environ(), crashDirEnv+"="+dir)
	daemon.Stderr = os.Stderr
	out, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	var child, member int
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, serr := fmt.Sscan(line, &child, &member); err != nil || serr != nil {
		_ = daemon.Process.Kill()
		t.Fatalf("daemon did not record its child: %q, %v, %v", line, err, serr)
	}
	t.Cleanup(func() { _ = syscall.Kill(member, syscall.SIGKILL) })
	if err := daemon.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = daemon.Wait()
	// The parent-death signal ends the shell; the sleep it started stays.
	waitDead(t, child)
	if !running(member) {
		t.Fatal("the member died with the daemon; nothing left to reap")
	}

	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, logged := reapOne(t, d, nil)
	if got.Verdict != Stopped || got.Record.PID != child || len(got.Members) != 1 || got.Members[0] != member {
		t.Fatalf("Reap = %+v, want %s with member %d; log:\n%s", got, Stopped, member, logged)
	}
	waitDead(t, member)
	if !strings.Contains(logged, "process group stopped") {
		t.Errorf("log does not say the group was stopped:\n%s", logged)
	}
}

func TestReapStopsARunningChildAndKillsWhatIgnoresSIGTERM(t *testing.T) {
	needBash(t)
	d := openDir(t)
	cmd, member := startGroup(t, `(trap '' TERM; sleep 300) </dev/null >/dev/null 2>&1 & echo $!; wait`)
	if _, err := d.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	got, logged := reapOne(t, d, nil)
	if got.Verdict != Stopped || !got.Killed || len(got.Members) != 2 {
		t.Fatalf("Reap = %+v, want %s, the shell and its member, SIGKILL; log:\n%s", got, Stopped, logged)
	}
	if !strings.HasSuffix(got.Image, "/bash") {
		t.Errorf("image %q, want bash", got.Image)
	}
	waitDead(t, member)
	_ = cmd.Wait()
}

func TestReapLeavesAPidNowHeldByAnotherProcess(t *testing.T) {
	needBash(t)
	d := openDir(t)
	cmd, member := startGroup(t, `sleep 300 </dev/null >/dev/null 2>&1 & echo $!; wait`)
	if _, err := d.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	path, rec := onlyFile(t, d)
	// The process at this pid started at another time than the recorded
	// child: it is not the child.
	rec.Start--
	writeRecord(t, path, rec)
	got, logged := reapOne(t, d, nil)
	if got.Verdict != Reused || len(got.Members) != 0 {
		t.Fatalf("Reap = %+v, want %s; log:\n%s", got, Reused, logged)
	}
	if !running(cmd.Process.Pid) || !running(member) {
		t.Error("Reap signalled a process that reused the pid")
	}
	if !strings.Contains(logged, "now names another process") {
		t.Errorf("log does not say the pid was reused:\n%s", logged)
	}
}

func TestReapLeavesAChildRunningAnImageNotOwned(t *testing.T) {
	needBash(t)
	for _, tc := range []struct {
		name  string
		image string // recorded; "" keeps the real one
		owned func(string) bool
		want  Verdict
	}{
		{name: "recorded image differs", image: "/usr/bin/not-a-shell", want: NotOwned},
		{name: "predicate refuses", owned: func(string) bool { return false }, want: NotOwned},
		{name: "predicate accepts", image: "/usr/bin/not-a-shell", owned: func(img string) bool { return strings.HasSuffix(img, "/bash") }, want: Stopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openDir(t)
			cmd, member := startGroup(t, `sleep 300 </dev/null >/dev/null 2>&1 & echo $!; wait`)
			if _, err := d.Add(cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			if tc.image != "" {
				path, rec := onlyFile(t, d)
				rec.Image = tc.image
				writeRecord(t, path, rec)
			}
			got, logged := reapOne(t, d, tc.owned)
			if got.Verdict != tc.want {
				t.Fatalf("Reap = %+v, want %s; log:\n%s", got, tc.want, logged)
			}
			if tc.want == Stopped {
				waitDead(t, member)
				return
			}
			if !running(cmd.Process.Pid) || !running(member) {
				t.Error("Reap signalled a child whose image it does not own")
			}
			if !strings.HasSuffix(got.Image, "/bash") || !strings.Contains(logged, "left running") {
				t.Errorf("image %q, log:\n%s", got.Image, logged)
			}
		})
	}
}

func TestReapRemovesTheFileOfAGroupThatExited(t *testing.T) {
	needBash(t)
	d := openDir(t)
	cmd := exec.Command("bash", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	got, logged := reapOne(t, d, nil)
	if got.Verdict != Gone {
		t.Fatalf("Reap = %+v, want %s; log:\n%s", got, Gone, logged)
	}
	if !strings.Contains(logged, "has exited") {
		t.Errorf("log does not say the group exited:\n%s", logged)
	}
}

func TestReapRemovesMalformedFiles(t *testing.T) {
	d := openDir(t)
	for name, body := range map[string]string{
		"garbage.json": "not json",
		"nopid.json":   `{"pgid":5}`,
		"huge.json":    `{"pid":5,"image":"` + strings.Repeat("x", MaxFileSize) + `"}`,
	} {
		if err := os.WriteFile(filepath.Join(d.Path(), name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logged bytes.Buffer
	got := d.Reap(context.Background(), slog.New(slog.NewTextHandler(&logged, nil)), nil)
	if len(got) != 3 {
		t.Fatalf("Reap = %+v, want three files", got)
	}
	for _, r := range got {
		if r.Verdict != Malformed {
			t.Errorf("%s: verdict %s, want %s", r.File, r.Verdict, Malformed)
		}
	}
	if left := files(t, d); len(left) != 0 {
		t.Errorf("files left: %q", left)
	}
	if n := strings.Count(logged.String(), "malformed PID file removed"); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, logged.String())
	}
}

func TestReapRefusesWhatItNeverSignals(t *testing.T) {
	d := openDir(t)
	own := syscall.Getpgrp()
	for i, rec := range []Record{
		{PID: 1, PGID: 1},
		{PID: -5, PGID: -5},
		{PID: own, PGID: own},
		{PID: os.Getpid(), PGID: own},
	} {
		writeRecord(t, filepath.Join(d.Path(), fmt.Sprintf("r%d.json", i)), rec)
	}
	got := d.Reap(context.Background(), nil, nil)
	if len(got) != 4 {
		t.Fatalf("Reap = %+v, want four files", got)
	}
	for _, r := range got {
		if r.Verdict != Refused {
			t.Errorf("%s %+v: verdict %s, want %s", r.File, r.Record, r.Verdict, Refused)
		}
	}
}

func TestReapRemovesFilesOfAnEarlierBoot(t *testing.T) {
	needBash(t)
	d := openDir(t)
	if d.boot == "" {
		t.Skip("no boot id in /proc on this system")
	}
	cmd, member := startGroup(t, `sleep 300 </dev/null >/dev/null 2>&1 & echo $!; wait`)
	if _, err := d.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	path, rec := onlyFile(t, d)
	rec.Boot = "00000000-0000-0000-0000-000000000000"
	writeRecord(t, path, rec)
	got, logged := reapOne(t, d, nil)
	if got.Verdict != Rebooted || !running(member) {
		t.Fatalf("Reap = %+v, member running %v; want %s, nothing signalled; log:\n%s", got, running(member), Rebooted, logged)
	}
}

func TestAddRecordsTheChildAndRemoveForgetsIt(t *testing.T) {
	needBash(t)
	d := openDir(t)
	// A write cut short by a crash: Reap removes it silently.
	if err := os.WriteFile(filepath.Join(d.Path(), ".1-2.json.123.tmp"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, _ := startGroup(t, `sleep 300 </dev/null >/dev/null 2>&1 & echo $!; wait`)
	remove, err := d.Add(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	for _, name := range files(t, d) {
		if !strings.HasPrefix(name, ".") {
			if rec, err = readRecord(filepath.Join(d.Path(), name)); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d-%d.json", rec.PID, rec.Start); name != want {
				t.Errorf("file %q, want %q", name, want)
			}
		}
	}
	st, err := readStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	want := Record{PID: cmd.Process.Pid, PGID: cmd.Process.Pid, SID: st.session, Start: st.start, Image: rec.Image, Boot: d.boot}
	if rec != want || !strings.HasSuffix(rec.Image, "/bash") {
		t.Errorf("record %+v, want %+v with bash's image", rec, want)
	}
	if fi, err := os.Stat(d.Path()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, %v; want 0700", fi.Mode(), err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if err := remove(); err != nil {
		t.Errorf("second remove: %v", err)
	}
	if got := d.Reap(context.Background(), nil, nil); len(got) != 0 {
		t.Errorf("Reap after remove = %+v, want nothing", got)
	}
	if left := files(t, d); len(left) != 0 {
		t.Errorf("files left: %q", left)
	}
}

func TestAddRefusesAChildThatDoesNotLeadItsGroup(t *testing.T) {
	needBash(t)
	d := openDir(t)
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := d.Add(cmd.Process.Pid); err == nil || !strings.Contains(err.Error(), "does not lead") {
		t.Errorf("Add = %v, want a refusal", err)
	}
	if left := files(t, d); len(left) != 0 {
		t.Errorf("files left: %q", left)
	}
}

func TestANilDirRecordsNothing(t *testing.T) {
	var d *Dir
	remove, err := d.Add(os.Getpid())
	if err != nil || remove() != nil {
		t.Fatalf("nil Dir: Add = %v", err)
	}
}
