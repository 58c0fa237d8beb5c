package shellexec

import (
	"os"
	"os/exec"
	"time"
)

// collectWaiting is collect for systems without a way to watch a child's
// exit while leaving it waitable (Linux has pidfds and waitid's WNOWAIT;
// macOS and Windows have neither in x/sys): a goroutine reads each stream
// and another reaps the shell with cmd.Wait, while the calling goroutine
// hands what is read to out, so out is still called from one goroutine.
// Once the shell exited, output still open after drain belongs to a
// background process: collectWaiting stops reading it and reports false.
// It returns Wait's error either way; the caller closes outs, which ends
// the readers.
//
// It builds everywhere, so the Linux tests run it too.
func collectWaiting(cmd *exec.Cmd, outs [2]*os.File, out sink, drain time.Duration) (complete bool, waitErr error) {
	type chunk struct {
		stream int
		data   []byte // nil at the stream's end
	}
	chunks := make(chan chunk)
	done := make(chan struct{}) // closed when the readers are no longer read
	defer close(done)
	var acks [2]chan struct{}
	for stream, f := range outs {
		acks[stream] = make(chan struct{}, 1)
		go func() {
			// One buffer per stream, reused once out took its bytes.
			buf := make([]byte, ReadSize)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					select {
					case chunks <- chunk{stream, buf[:n]}:
					case <-done:
						return
					}
					<-acks[stream]
				}
				if err != nil {
					select {
					case chunks <- chunk{stream: stream}:
					case <-done:
					}
					return
				}
			}
		}()
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	open, exited := len(outs), false
	var drained <-chan time.Time // fires drain after the shell exited
	for open > 0 || !exited {
		select {
		case c := <-chunks:
			if c.data == nil {
				open--
				continue
			}
			out.write(c.stream, c.data)
			acks[c.stream] <- struct{}{}
		case waitErr = <-waited:
			exited = true
			if open > 0 {
				t := time.NewTimer(drain)
				defer t.Stop()
				drained = t.C
			}
		case <-drained:
			return false, waitErr
		}
	}
	return true, waitErr
}
