package shellexec

import "os"

// closeAll closes every end of an exec's pipes the daemon still holds,
// on every system: the ends the child was given and the daemon's own.
func (p *pipes) closeAll() {
	for _, f := range []*os.File{p.stdinR, p.stdinW, p.stdoutW, p.stderrW} {
		closeFile(f)
	}
	p.closeOutput(streamStdout)
	p.closeOutput(streamStderr)
}

func closeFile(f *os.File) {
	if f != nil {
		_ = f.Close() // a second close only reports os.ErrClosed
	}
}
