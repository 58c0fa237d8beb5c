package runners

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"
)

// maxLogLine splits longer output lines into several log records.
const maxLogLine = 64 << 10

// OutputLog carries a child's stdout and stderr into the daemon log, one
// record per line, tagged with the stream, and into a Tail when given one
// (Feed), as the bytes come. Runners give its write ends to the child (a
// docker or kubectl client, an entry program).
type OutputLog struct {
	log              *slog.Logger
	tail             *Tail
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
}

// NewOutputLog opens the two pipes.
func NewOutputLog(log *slog.Logger) (*OutputLog, error) {
	o := &OutputLog{log: log}
	var err error
	if o.stdoutR, o.stdoutW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if o.stderrR, o.stderrW, err = os.Pipe(); err != nil {
		o.CloseChildEnds()
		o.Close()
		return nil, err
	}
	return o, nil
}

// Feed has Start write both streams into t too, interleaved as they are
// read, each chunk as soon as it is (not a line at a time). Call it before
// Start; a nil t feeds nothing.
func (o *OutputLog) Feed(t *Tail) { o.tail = t }

// Stdout is the write end for the child's stdout.
func (o *OutputLog) Stdout() *os.File { return o.stdoutW }

// Stderr is the write end for the child's stderr.
func (o *OutputLog) Stderr() *os.File { return o.stderrW }

// CloseChildEnds closes the parent's copies of the write ends once the
// child has them (or failed to start), so EOF comes when the child is done.
func (o *OutputLog) CloseChildEnds() {
	_ = o.stdoutW.Close()
	if o.stderrW != nil {
		_ = o.stderrW.Close()
	}
}

// Close stops the readers; a second call only reports os.ErrClosed.
func (o *OutputLog) Close() {
	_ = o.stdoutR.Close()
	if o.stderrR != nil {
		_ = o.stderrR.Close()
	}
}

// Start logs both streams until EOF and closes the returned channel then.
func (o *OutputLog) Start() <-chan struct{} {
	done := make(chan struct{})
	half := make(chan struct{})
	go func() { logLines(o.reader(o.stdoutR), o.log.With("stream", "stdout")); half <- struct{}{} }()
	go func() { logLines(o.reader(o.stderrR), o.log.With("stream", "stderr")); <-half; close(done) }()
	return done
}

// reader is r, copied into the tail as it is read when there is one.
func (o *OutputLog) reader(r io.Reader) io.Reader {
	if o.tail == nil {
		return r
	}
	return io.TeeReader(r, o.tail)
}

// Drain waits for the readers (from Start) to reach EOF, for at most
// grace: a grandchild may keep the pipes open after the child exited.
func (o *OutputLog) Drain(done <-chan struct{}, grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		o.Close()
		<-done
	}
}

func logLines(r io.Reader, log *slog.Logger) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] == '\n' {
				line = line[:len(line)-1]
			}
			log.Info("child output", "line", string(line))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}
