package fifoclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
)

// readSize is the read buffer of a lane; replies larger than this arrive
// in several reads.
const readSize = 64 << 10

// keepDecoder bounds the decoder buffer a lane keeps between requests: a
// rare large reply should not pin its size for the daemon's lifetime.
const keepDecoder = 1 << 20

// exchange writes the lane's encoded frame and waits for the reply to id
// (any reply when id is empty, in raw mode).
func (c *Client) exchange(ctx context.Context, ln *lane, id string) (*transport.Response, error) {
	// The response pipe is opened O_RDWR rather than O_RDONLY: holding a
	// write end ourselves means a read finds EAGAIN, not end-of-file, while
	// the relay has not opened its end yet, so the poller can park us.
	resp, err := openFIFO(ln.resp, unix.O_RDWR)
	if err != nil {
		return nil, err
	}
	defer resp.Close()
	// Whatever already sits in the pipe predates our request: drop it so a
	// stale reply (or a stale fragment of one) cannot even be parsed.
	if n, err := drainNow(resp); err != nil {
		return nil, fmt.Errorf("drain %s: %w", ln.resp, err)
	} else if n > 0 {
		c.log.Info("fifoclient: dropped stale reply bytes", "pipe", ln.resp, "bytes", n)
	}
	req, err := openFIFO(ln.req, unix.O_WRONLY)
	if errors.Is(err, unix.ENXIO) {
		return nil, fmt.Errorf("%w: %w", ErrNoRelay, err)
	}
	if err != nil {
		return nil, err
	}
	defer req.Close()
	stop := context.AfterFunc(ctx, func() {
		past := time.Unix(1, 0) // wakes the poller at once
		resp.SetDeadline(past)
		req.SetDeadline(past)
	})
	defer stop()

	if n, err := req.Write(ln.buf); err != nil {
		if n > 0 {
			// The relay holds a partial frame; our next bytes would be read
			// as its rest until its stall timer discards it.
			ln.stalledUntil = time.Now().Add(StallTimeout)
			c.log.Warn("fifoclient: frame cut off mid-write", "pipe", ln.req, "written", n, "of", len(ln.buf))
		}
		return nil, cause(ctx, fmt.Errorf("write: %w", err))
	}
	// req stays open while we wait, for the relay watch.
	w := watchRelay(req, resp, len(ln.buf))
	r, err := c.awaitReply(ctx, ln, resp, id)
	w.stop()
	if w.lost.Load() {
		if w.torn.Load() {
			ln.stalledUntil = time.Now().Add(StallTimeout)
		}
		return nil, fmt.Errorf("%w: the relay exited with the request in flight (nobody reads %s)", ErrNoRelay, ln.req)
	}
	return r, err
}

// relayWatch notices the relay exiting while a request waits for its
// reply. The relay holds the only read end of req, so its exit (kill -9, a
// crash) makes the pipe report POLLERR to our write end, and the poller
// wakes us at that moment, microseconds later: a new relay process, which
// takes milliseconds to start, opens the pipe only after we looked. (A
// reader that comes back within those microseconds hides the exit, and
// the request then waits out its timeout.) If our frame still sits unread in the pipe, the next
// relay will read and answer it, so the request goes on waiting; if the
// dead relay had taken it, the request is lost and fails at once (the
// relay sends nothing to say so: every frame on resp answers a request).
type relayWatch struct {
	req  *os.File
	lost atomic.Bool
	// torn: the dead relay took part of our frame; the rest, still in the
	// pipe, would be read by the next relay as the start of a frame.
	torn atomic.Bool
	done chan struct{}
}

func watchRelay(req, resp *os.File, frameLen int) *relayWatch {
	w := &relayWatch{req: req, done: make(chan struct{})}
	rc, err := req.SyscallConn()
	if err != nil {
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		rc.Write(func(fd uintptr) bool {
			if !noReader(int(fd)) {
				return false // woken by the relay reading; wait on
			}
			unread, err := unreadBytes(int(fd))
			if err == nil && unread == frameLen {
				return false // untouched: the next relay will answer it
			}
			w.torn.Store(err == nil && unread > 0)
			w.lost.Store(true)
			resp.SetReadDeadline(time.Unix(1, 0)) // wakes the reader
			return true
		})
	}()
	return w
}

// stop ends the watch and waits for its goroutine.
func (w *relayWatch) stop() {
	w.req.SetWriteDeadline(time.Unix(1, 0))
	<-w.done
}

// noReader reports whether a pipe's write end fd has no reader left.
func noReader(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd)}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n > 0 && pfd[0].Revents&unix.POLLERR != 0
}

func (c *Client) awaitReply(ctx context.Context, ln *lane, resp *os.File, id string) (*transport.Response, error) {
	ln.dec.Reset()
	largest := 0
	defer func() {
		if largest > keepDecoder || ln.dec.Buffered() > keepDecoder {
			ln.dec = frame.Decoder{}
		}
	}()
	if ln.rbuf == nil {
		ln.rbuf = make([]byte, readSize)
	}
	for {
		for {
			p, ok, err := ln.dec.Next()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", ln.resp, err)
			}
			if !ok {
				break
			}
			largest = max(largest, len(p))
			if id == "" {
				return ParseRawReply(p)
			}
			r, mine, err := ParseReply(p, id)
			if mine {
				return r, err
			}
			// A raw relay_error while we wait for an id reply answers a
			// frame too broken to carry a readable id, or one cut off by
			// the relay's shutdown before its id was read: ours, since a
			// lane has one request at a time. (A relay of an earlier
			// version also sent one unasked when it restarted.)
			if f, ok := rawRelayError(p); ok {
				return nil, &RelayError{Message: f.Message}
			}
			c.log.Info("fifoclient: discarded a reply to another request", "pipe", ln.resp, "bytes", len(p))
		}
		n, err := resp.Read(ln.rbuf)
		ln.dec.Feed(ln.rbuf[:n])
		if err != nil {
			return nil, cause(ctx, fmt.Errorf("read %s: %w", ln.resp, err))
		}
	}
}

// openFIFO opens path non-blocking and hands it to Go's poller; anything
// but a FIFO is refused, so a stray regular file never receives frames.
func openFIFO(path string, mode int) (*os.File, error) {
	fd, err := unix.Open(path, mode|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: errors.New("not a FIFO")}
	}
	// A non-blocking descriptor makes os.NewFile register it with the
	// poller: reads and writes park a goroutine and honour deadlines.
	return os.NewFile(uintptr(fd), path), nil
}

// drainNow reads and discards whatever the pipe holds right now, without
// waiting for more.
func drainNow(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var buf [4096]byte
	total := 0
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Read(int(fd), buf[:])
			if n > 0 {
				total += n
				continue
			}
			if err != nil && err != unix.EAGAIN && err != unix.EINTR {
				rerr = err
			}
			if err == unix.EINTR {
				continue
			}
			return true // never wait: only what is there now
		}
	})
	if err == nil {
		err = rerr
	}
	return total, err
}

// cause prefers the context's reason (timeout or cancellation) over the
// deadline error the poller reports when the context ended.
func cause(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.Cause(ctx)
	}
	return err
}
