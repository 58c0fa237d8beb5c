//go:build unix

package shellexec

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/procgroup"
)

// startShellFiles spawns bash -c script with stdout and stderr on os.Pipe
// files, the way pipes_other.go hands them to collectWaiting.
func startShellFiles(t *testing.T, script string) (*exec.Cmd, [2]*os.File) {
	t.Helper()
	var outs, ends [2]*os.File
	for i := range outs {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		outs[i], ends[i] = r, w
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Stdout, cmd.Stderr = ends[streamStdout], ends[streamStderr]
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL) })
	ends[0].Close()
	ends[1].Close()
	return cmd, outs
}

func TestCollectWaitingBothStreamsPastPipeBuffer(t *testing.T) {
	// 300 KB on stderr before anything on stdout, then 300 KB on stdout:
	// reading one stream only would leave the child blocked.
	const n = 300_000
	cmd, outs := startShellFiles(t, "head -c 300000 /dev/zero | tr '\\0' e >&2; head -c 300000 /dev/zero | tr '\\0' o; exit 4")
	c := &capture{}
	complete, err := collectWaiting(cmd, outs, c, time.Second)
	if !complete {
		t.Fatal("collectWaiting: incomplete")
	}
	if code, _ := exitCode(err); code != 4 {
		t.Fatalf("Wait's error %v, want exit status 4", err)
	}
	if len(c.buf[streamStdout]) != n || len(c.buf[streamStderr]) != n {
		t.Fatalf("got %d stdout and %d stderr bytes, want %d each", len(c.buf[streamStdout]), len(c.buf[streamStderr]), n)
	}
	if strings.Trim(string(c.buf[streamStdout]), "o") != "" || strings.Trim(string(c.buf[streamStderr]), "e") != "" {
		t.Fatal("streams mixed up")
	}
}

func TestCollectWaitingGivesUpOnBackgroundHolder(t *testing.T) {
	// The shell exits at once; its background sleep keeps both pipes
	// open. collectWaiting must stop after the drain grace.
	cmd, outs := startShellFiles(t, "echo out; echo err >&2; sleep 30 &")
	c := &capture{}
	start := time.Now()
	complete, err := collectWaiting(cmd, outs, c, 200*time.Millisecond)
	if complete || err != nil {
		t.Fatalf("collectWaiting: complete=%v err=%v, want incomplete and exit 0", complete, err)
	}
	if el := time.Since(start); el < 200*time.Millisecond || el > 5*time.Second {
		t.Fatalf("collectWaiting took %v, want the 200ms drain grace", el)
	}
	if string(c.buf[streamStdout]) != "out\n" || string(c.buf[streamStderr]) != "err\n" {
		t.Fatalf("captured %q / %q", c.buf[streamStdout], c.buf[streamStderr])
	}
}

func TestCollectWaitingOutputClosedBeforeExit(t *testing.T) {
	// Output reaches EOF while the shell still runs: collectWaiting goes
	// on until the shell exits.
	cmd, outs := startShellFiles(t, "echo bye; exec >&- 2>&-; sleep 0.3; exit 2")
	c := &capture{}
	start := time.Now()
	complete, err := collectWaiting(cmd, outs, c, time.Second)
	if code, _ := exitCode(err); !complete || code != 2 || string(c.buf[streamStdout]) != "bye\n" {
		t.Fatalf("complete=%v err=%v stdout=%q", complete, err, c.buf[streamStdout])
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("returned after %v, before the shell exited", el)
	}
}
