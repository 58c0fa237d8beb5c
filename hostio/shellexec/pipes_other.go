//go:build !linux

package shellexec

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"
)

// pipes are the three pipes of one child, all os.Pipe files: the child's
// ends are handed to exec.Cmd, the parent's read ends are read by
// collectWaiting's goroutines. (Linux keeps the read ends as raw
// descriptors for poll(2); pipes_linux.go says why.)
type pipes struct {
	stdinR, stdinW   *os.File
	stdoutW, stderrW *os.File
	// out are the parent's read ends, indexed by stream; nil once closed.
	out [2]*os.File
}

var streamNames = [2]string{streamStdout: "stdout", streamStderr: "stderr"}

func openPipes() (*pipes, error) {
	p := &pipes{}
	var err error
	if p.stdinR, p.stdinW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	childEnds := [2]**os.File{streamStdout: &p.stdoutW, streamStderr: &p.stderrW}
	for stream, w := range childEnds {
		if p.out[stream], *w, err = os.Pipe(); err != nil {
			p.closeAll()
			return nil, fmt.Errorf("%s pipe: %w", streamNames[stream], err)
		}
	}
	return p, nil
}

// awaitShell reads the child's output into out and reaps the shell
// (collectWaiting: there is no exit watch that leaves the shell waitable
// here, so it is reaped as soon as it exits; the guard's stop still
// reaches the group its pid led).
func awaitShell(cmd *exec.Cmd, p *pipes, out sink, drain time.Duration, log *slog.Logger) error {
	complete, waitErr := collectWaiting(cmd, p.out, out, drain)
	noteCollected(log, complete, nil)
	// A background process still writing gets EPIPE rather than blocking.
	p.closeOutput(streamStdout)
	p.closeOutput(streamStderr)
	return waitErr
}

// closeChildEnds closes the ends the child inherited, so EOF arrives when
// the last process holding them exits.
func (p *pipes) closeChildEnds() {
	closeFile(p.stdinR)
	closeFile(p.stdoutW)
	closeFile(p.stderrW)
}

// closeOutput closes the parent's read end of one stream, which also ends
// its reader.
func (p *pipes) closeOutput(stream int) {
	if p.out[stream] != nil {
		closeFile(p.out[stream])
		p.out[stream] = nil
	}
}
