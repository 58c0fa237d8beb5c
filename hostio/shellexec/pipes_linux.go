package shellexec

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// pipes are the three pipes of one child. The child's ends are files
// handed to exec.Cmd. The parent keeps the write end of stdin (on Go's
// poller, fed by a goroutine when there is anything to feed) and the read
// ends of stdout and stderr as raw blocking descriptors, which collect
// reads with poll(2) from the exec's own goroutine.
type pipes struct {
	stdinR, stdinW   *os.File
	stdoutW, stderrW *os.File
	// out are the parent's read ends, indexed by stream; -1 once closed.
	out [2]int
}

var streamNames = [2]string{streamStdout: "stdout", streamStderr: "stderr"}

func openPipes() (*pipes, error) {
	p := &pipes{out: [2]int{-1, -1}}
	var err error
	if p.stdinR, p.stdinW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	childEnds := [2]**os.File{streamStdout: &p.stdoutW, streamStderr: &p.stderrW}
	for stream, w := range childEnds {
		var fds [2]int
		if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
			p.closeAll()
			return nil, fmt.Errorf("%s pipe: %w", streamNames[stream], err)
		}
		p.out[stream] = fds[0]
		*w = os.NewFile(uintptr(fds[1]), streamNames[stream])
	}
	return p, nil
}

// closeChildEnds closes the ends the child inherited, so EOF arrives when
// the last process holding them exits.
func (p *pipes) closeChildEnds() {
	closeFile(p.stdinR)
	closeFile(p.stdoutW)
	closeFile(p.stderrW)
}

// closeOutput closes the parent's read end of one stream; a process still
// writing to it gets EPIPE instead of blocking.
func (p *pipes) closeOutput(stream int) {
	if p.out[stream] >= 0 {
		_ = unix.Close(p.out[stream])
		p.out[stream] = -1
	}
}
