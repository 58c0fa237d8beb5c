//go:build linux

package procgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// start runs bash -c script as the leader of its own group and returns it
// once the script printed the pid of the member it started (its traps are
// then set).
func start(t *testing.T, script string) (cmd *exec.Cmd, member int) {
	t.Helper()
	cmd = exec.Command("bash", "-c", script)
	cmd.SysProcAttr = Attr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("bash: %v", err)
	}
	t.Cleanup(func() { _ = Signal(cmd.Process.Pid, syscall.SIGKILL) })
	if _, err := fmt.Fscan(out, &member); err != nil {
		t.Fatalf("script did not start: %v", err)
	}
	return cmd, member
}

// waitDead waits until pid runs nothing: gone, or a zombie that whoever
// inherited it has not reaped yet.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return
		}
	}
	t.Errorf("process %d of the group outlived the stop", pid)
}

func TestWaitOrStopReturnsWaitWhenTheChildExits(t *testing.T) {
	cmd := exec.Command("bash", "-c", "exit 3")
	cmd.SysProcAttr = Attr()
	if err := cmd.Start(); err != nil {
		t.Skipf("bash: %v", err)
	}
	stopped, err := WaitOrStop(context.Background(), cmd, time.Second, nil)
	var ee *exec.ExitError
	if stopped || !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("WaitOrStop = %v, %v; want not stopped, exit status 3", stopped, err)
	}
}

func TestWaitOrStopTermsThenKillsTheGroup(t *testing.T) {
	// The leader ignores SIGTERM, and so does the child it started.
	cmd, member := start(t, `trap '' TERM; (trap '' TERM; sleep 60) & echo $!; wait`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	begin := time.Now()
	stopped, err := WaitOrStop(ctx, cmd, 200*time.Millisecond, func() { called = true })
	if !stopped || err != nil || !called {
		t.Fatalf("WaitOrStop = %v, %v, onStop called %v; want stopped, onStop called", stopped, err, called)
	}
	if d := time.Since(begin); d < 200*time.Millisecond {
		t.Errorf("SIGKILL after %s, before the grace", d)
	}
	waitDead(t, member)
}

func TestStopKillsAMemberThatOutlivesItsLeader(t *testing.T) {
	// The leader exits on SIGTERM; its child does not.
	cmd, member := start(t, `(trap '' TERM; sleep 60) & echo $!; wait`)
	gone := make(chan struct{})
	go func() { cmd.Wait(); close(gone) }()
	if killed := Stop(cmd.Process.Pid, gone, 200*time.Millisecond); killed {
		t.Error("Stop reports the leader killed; it exited on SIGTERM")
	}
	waitDead(t, member)
}

func TestStopReportsALeaderKilled(t *testing.T) {
	cmd, _ := start(t, `trap '' TERM; echo $$; while :; do sleep 0.05; done`)
	gone := make(chan struct{})
	go func() { cmd.Wait(); close(gone) }()
	if killed := Stop(cmd.Process.Pid, gone, 100*time.Millisecond); !killed {
		t.Error("Stop does not report the SIGKILL of a leader that ignored SIGTERM")
	}
}
