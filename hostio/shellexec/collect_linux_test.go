package shellexec

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/procgroup"
)

// startShell spawns bash -c script on fresh pipes, as spawnAndWait does.
func startShell(t *testing.T, script string) (*exec.Cmd, *pipes) {
	t.Helper()
	p, err := openPipes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.closeAll)
	cmd := exec.Command("bash", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdinR, p.stdoutW, p.stderrW
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL) })
	p.closeChildEnds()
	closeFile(p.stdinW)
	return cmd, p
}

// Both ways of noticing the shell's exit: a pidfd, and the periodic peek
// used where the kernel has none.
var exitWatchers = map[string]func(pid int) exitWatch{
	"pidfd": watchExit,
	"peek":  func(pid int) exitWatch { return exitWatch{pid: pid, pidfd: -1} },
}

func TestCollectBothStreamsPastPipeBuffer(t *testing.T) {
	// 300 KB on stderr before anything on stdout, then 300 KB on stdout:
	// reading one stream only would leave the child blocked.
	const n = 300_000
	for name, watch := range exitWatchers {
		t.Run(name, func(t *testing.T) {
			cmd, p := startShell(t, "head -c 300000 /dev/zero | tr '\\0' e >&2; head -c 300000 /dev/zero | tr '\\0' o")
			w := watch(cmd.Process.Pid)
			defer w.close()
			c := &capture{}
			complete, err := collect(p, w, c, time.Second)
			if err != nil || !complete {
				t.Fatalf("collect: complete=%v err=%v", complete, err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			if len(c.buf[streamStdout]) != n || len(c.buf[streamStderr]) != n {
				t.Fatalf("got %d stdout and %d stderr bytes, want %d each", len(c.buf[streamStdout]), len(c.buf[streamStderr]), n)
			}
			if strings.Trim(string(c.buf[streamStdout]), "o") != "" || strings.Trim(string(c.buf[streamStderr]), "e") != "" {
				t.Fatal("streams mixed up")
			}
		})
	}
}

func TestCollectGivesUpOnBackgroundHolder(t *testing.T) {
	// The shell exits at once; its background sleep keeps both pipes
	// open. collect must notice the exit and stop after the drain grace.
	for name, watch := range exitWatchers {
		t.Run(name, func(t *testing.T) {
			cmd, p := startShell(t, "echo out; echo err >&2; sleep 30 &")
			w := watch(cmd.Process.Pid)
			defer w.close()
			c := &capture{}
			start := time.Now()
			complete, err := collect(p, w, c, 200*time.Millisecond)
			if err != nil || complete {
				t.Fatalf("collect: complete=%v err=%v, want incomplete", complete, err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("collect took %v", el)
			}
			if string(c.buf[streamStdout]) != "out\n" || string(c.buf[streamStderr]) != "err\n" {
				t.Fatalf("captured %q / %q", c.buf[streamStdout], c.buf[streamStderr])
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the shell was not left waitable: %v", err)
			}
		})
	}
}

func TestCollectShellClosingItsOutputEarly(t *testing.T) {
	// Output reaches EOF while the shell still runs: collect returns at
	// once and the caller's Wait does the rest.
	cmd, p := startShell(t, "echo bye; exec >&- 2>&-; sleep 0.3")
	w := watchExit(cmd.Process.Pid)
	defer w.close()
	c := &capture{}
	complete, err := collect(p, w, c, time.Second)
	if err != nil || !complete || string(c.buf[streamStdout]) != "bye\n" {
		t.Fatalf("complete=%v err=%v stdout=%q", complete, err, c.buf[streamStdout])
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}
