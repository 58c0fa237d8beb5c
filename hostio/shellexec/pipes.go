package shellexec

import (
	"io"
	"os"
	"sync"
)

// pipes are the three pipes of one child. The parent keeps its ends to
// itself: the read ends of stdout/stderr and the write end of stdin.
type pipes struct {
	stdinR, stdinW   *os.File
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
	closeOnce        sync.Once
}

func openPipes() (*pipes, error) {
	p := &pipes{}
	var err error
	if p.stdinR, p.stdinW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.stdoutR, p.stdoutW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, err
	}
	if p.stderrR, p.stderrW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, err
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

func (p *pipes) closeReadEnds() {
	closeFile(p.stdoutR)
	closeFile(p.stderrR)
}

func (p *pipes) closeAll() {
	p.closeOnce.Do(func() {
		for _, f := range []*os.File{p.stdinR, p.stdinW, p.stdoutR, p.stdoutW, p.stderrR, p.stderrW} {
			closeFile(f)
		}
	})
}

func closeFile(f *os.File) {
	if f != nil {
		_ = f.Close() // a second close only reports os.ErrClosed
	}
}

// startReaders copies both streams into out in ReadSize reads and closes
// the returned channel when both reached EOF or were closed.
func (p *pipes) startReaders(out sink) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pump(p.stdoutR, streamStdout, out) }()
	go func() { defer wg.Done(); pump(p.stderrR, streamStderr, out) }()
	go func() { wg.Wait(); close(done) }()
	return done
}

func pump(r io.Reader, stream int, out sink) {
	buf := make([]byte, ReadSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			out.write(stream, buf[:n])
		}
		if err != nil {
			// EOF, or the read end was closed after the drain grace.
			return
		}
	}
}
