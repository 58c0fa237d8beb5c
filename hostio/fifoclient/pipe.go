//go:build unix

package fifoclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
)

// readSize is the read buffer of a lane; replies larger than this arrive
// in several reads.
const readSize = 64 << 10

// supported says the fifo transport works here.
func supported() error { return nil }

// keepDecoder bounds the decoder buffer a lane keeps between requests: a
// rare large reply should not pin its size for the daemon's lifetime.
const keepDecoder = 1 << 20

// exchange writes the lane's encoded frame and waits for the reply to id
// (any reply when id is empty, in raw mode).
//
// The lane's pipes stay open from one request to the next (opening,
// checking and closing both per request was about a third of a small
// request's time through a relay); before each request their paths are
// looked up again, so a pair replaced under its names is opened afresh.
// After any failure they are closed, and the next request starts from a
// clean open.
func (c *Client) exchange(ctx context.Context, ln *lane, id string) (*transport.Response, error) {
	op, err := ln.pair()
	if err != nil {
		return nil, err
	}
	// Whatever already sits in the pipe predates our request: replies to
	// requests given up on, whole or begun. They go through the decoder,
	// which drops them and skips the rest of one still arriving (a large
	// reply streamed on after its request was abandoned), so the stream
	// stays in step: dropping its bytes blindly would leave the rest to
	// be read as frames of their own.
	if err := c.dropStale(ln, op.resp); err != nil {
		ln.closePair()
		return nil, fmt.Errorf("drain %s: %w", ln.resp, err)
	}
	stop := context.AfterFunc(ctx, op.interrupt)
	defer stop()

	seq := op.begin(len(ln.buf))
	if n, err := op.req.Write(ln.buf); err != nil {
		op.end()
		ln.closePair()
		if n > 0 {
			// The relay holds a partial frame; our next bytes would be read
			// as its rest until its stall timer discards it.
			ln.stalledUntil = time.Now().Add(StallTimeout)
			c.log.Warn("fifoclient: frame cut off mid-write", "pipe", ln.req, "written", n, "of", len(ln.buf))
		}
		if errors.Is(err, unix.EPIPE) {
			return nil, fmt.Errorf("%w: nobody reads %s", ErrNoRelay, ln.req)
		}
		return nil, cause(ctx, fmt.Errorf("write: %w", err))
	}
	r, err := c.awaitReply(ctx, ln, op.resp, id)
	op.end()
	if lost, torn := op.lostIn(seq); lost {
		defer ln.dec.Reset() // a dead relay's torn reply never ends
		if err != nil && ctx.Err() == nil {
			// The watcher cut the wait short. A relay that stops answers
			// what finished before it closes its pipes: that reply may be
			// in resp already, and is ours.
			r, err = c.replyLeft(ln, op.resp, id)
		}
		ln.closePair()
		if err == nil {
			return r, nil
		}
		if torn {
			ln.stalledUntil = time.Now().Add(StallTimeout)
		}
		return nil, fmt.Errorf("%w: the relay exited with the request in flight (nobody reads %s)", ErrNoRelay, ln.req)
	}
	if err != nil || ctx.Err() != nil {
		ln.closePair() // also clears a deadline the context's end may have set
	}
	return r, err
}

// openPair is a lane's pipes while they are open: resp O_RDWR (holding a
// write end ourselves, a read finds EAGAIN rather than end of file while
// no relay holds the pipe, so the poller can park us) and req O_WRONLY.
type openPair struct {
	req, resp       *os.File
	reqKey, respKey fileKey
	watcher         *os.File      // a duplicate of req, for the watcher's wait
	done            chan struct{} // closed when the watcher ends

	// inflight is the length of the frame waiting for its reply (0: none)
	// and seq its request's number; lost is the number of the request the
	// watcher found lost, torn set when the dead relay took part of it.
	mu       sync.Mutex
	inflight int
	seq      uint64
	lost     uint64
	torn     bool
}

func keyOf(st *unix.Stat_t) fileKey { return fileKey{uint64(st.Dev), st.Ino} }

// pair returns the lane's open pipes, opening them (again) when they are
// not open or were replaced under their names. ENXIO from req means no
// relay holds it: ErrNoRelay.
func (ln *lane) pair() (*openPair, error) {
	if op := ln.open; op != nil {
		var st unix.Stat_t
		if unix.Stat(ln.req, &st) == nil && keyOf(&st) == op.reqKey &&
			unix.Stat(ln.resp, &st) == nil && keyOf(&st) == op.respKey {
			return op, nil
		}
		ln.closePair()
	}
	resp, respKey, err := openFIFO(ln.resp, unix.O_RDWR)
	if err != nil {
		return nil, err
	}
	req, reqKey, err := openFIFO(ln.req, unix.O_WRONLY)
	if err != nil {
		resp.Close()
		if errors.Is(err, unix.ENXIO) {
			return nil, fmt.Errorf("%w: %w", ErrNoRelay, err)
		}
		return nil, err
	}
	op := &openPair{req: req, resp: resp, reqKey: reqKey, respKey: respKey, done: make(chan struct{})}
	op.watch()
	ln.open = op
	if respKey != ln.respKey {
		// Another pipe than the one the decoder was reading: nothing it
		// holds or skips belongs to this stream.
		ln.dec.Reset()
		ln.respKey = respKey
	}
	return op, nil
}

// closePair closes the lane's pipes and ends their watcher.
func (ln *lane) closePair() {
	op := ln.open
	if op == nil {
		return
	}
	ln.open = nil
	if op.watcher != nil {
		op.watcher.SetWriteDeadline(time.Unix(1, 0)) // ends the watcher's wait
		<-op.done
		op.watcher.Close()
	}
	op.req.Close()
	op.resp.Close()
}

// interrupt wakes a request's write and read at once (its context ended).
func (op *openPair) interrupt() {
	past := time.Unix(1, 0)
	op.resp.SetReadDeadline(past)
	op.req.SetWriteDeadline(past)
}

func (op *openPair) begin(frameLen int) uint64 {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.seq++
	op.inflight = frameLen
	return op.seq
}

func (op *openPair) end() {
	op.mu.Lock()
	op.inflight = 0
	op.mu.Unlock()
}

func (op *openPair) lostIn(seq uint64) (lost, torn bool) {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.lost == seq, op.torn
}

// watch notices the relay exiting while a request waits for its reply.
// The relay holds the only read end of req, so its exit (kill -9, a
// crash) makes the pipe report POLLERR to our write end, and the poller
// wakes the watcher at that moment, microseconds later: a new relay
// process, which takes milliseconds to start, opens the pipe only after it
// looked. (A reader that comes back within those microseconds hides the
// exit, and the request then waits out its timeout.) If our frame still
// sits unread in the pipe, the next relay will read and answer it, so the
// request goes on waiting; if the dead relay had taken it, the request is
// lost and fails at once (the relay sends nothing to say so: every frame
// on resp answers a request). Nothing else wakes the watcher but a relay
// reading from a full pipe, so it costs nothing per request.
func (op *openPair) watch() {
	// The watcher waits on a descriptor of its own: a goroutine parked in
	// a write-readiness wait holds its file's write lock, which a request
	// writing a frame larger than the pipe needs.
	// (Control, not Fd: Fd would make the descriptor blocking.)
	fd := -1
	if rc, err := op.req.SyscallConn(); err == nil {
		rc.Control(func(orig uintptr) { fd, _ = unix.FcntlInt(orig, unix.F_DUPFD_CLOEXEC, 0) })
	}
	if fd < 0 {
		close(op.done)
		return
	}
	op.watcher = os.NewFile(uintptr(fd), op.req.Name())
	rc, err := op.watcher.SyscallConn()
	if err != nil {
		close(op.done)
		return
	}
	go func() {
		defer close(op.done)
		rc.Write(func(fd uintptr) bool {
			if !noReader(int(fd)) {
				return false // woken by the relay reading; wait on
			}
			op.mu.Lock()
			defer op.mu.Unlock()
			if op.inflight == 0 || op.lost == op.seq {
				return false // nothing waiting: a write will say EPIPE
			}
			unread, err := unreadBytes(int(fd))
			if err == nil && unread == op.inflight {
				return false // untouched: the next relay will answer it
			}
			op.lost, op.torn = op.seq, err == nil && unread > 0
			op.resp.SetReadDeadline(time.Unix(1, 0)) // wakes the reader
			return false
		})
	}()
}

// noReader reports whether a pipe's write end fd has no reader left.
func noReader(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd)}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n > 0 && pfd[0].Revents&unix.POLLERR != 0
}

func (c *Client) awaitReply(ctx context.Context, ln *lane, resp *os.File, id string) (*transport.Response, error) {
	largest := 0
	defer ln.dec.Compact(keepDecoder)
	if ln.rbuf == nil {
		ln.rbuf = make([]byte, readSize)
	}
	for {
		if r, done, err := c.nextReply(ln, id, &largest); done {
			return r, err
		}
		n, err := resp.Read(ln.rbuf)
		ln.dec.Feed(ln.rbuf[:n])
		if err != nil {
			return nil, cause(ctx, fmt.Errorf("read %s: %w", ln.resp, err))
		}
	}
}

// nextReply takes the frames the decoder holds until one answers id (any,
// when id is empty); done is false when none did yet. largest grows to
// the longest frame seen.
func (c *Client) nextReply(ln *lane, id string, largest *int) (r *transport.Response, done bool, err error) {
	for {
		p, ok, err := ln.dec.Next()
		if err != nil {
			ln.dec.Reset() // out of step: only a fresh stream helps
			return nil, true, fmt.Errorf("read %s: %w", ln.resp, err)
		}
		if !ok {
			return nil, false, nil
		}
		*largest = max(*largest, len(p))
		if id == "" {
			r, err := response(frame.ParseRawReply(p))
			return r, true, err
		}
		reply, mine, err := frame.ParseReply(p, id)
		if mine {
			r, err := response(reply, err)
			return r, true, err
		}
		// A raw relay_error while we wait for an id reply answers a
		// frame too broken to carry a readable id, or one cut off by
		// the relay's shutdown before its id was read: ours, since a
		// lane has one request at a time. (A relay of an earlier
		// version also sent one unasked when it restarted.)
		if f, ok := frame.RawRelayError(p); ok {
			return nil, true, &frame.RelayError{Message: f.Message}
		}
		c.log.Info("fifoclient: discarded a reply to another request", "pipe", ln.resp, "bytes", len(p))
	}
}

// replyLeft looks for the reply to id among the bytes resp holds right
// now, the wait for more being over (the relay went away).
func (c *Client) replyLeft(ln *lane, resp *os.File, id string) (*transport.Response, error) {
	resp.SetReadDeadline(time.Time{})
	left, err := readNow(resp)
	ln.dec.Feed(left)
	largest := 0
	if r, done, rerr := c.nextReply(ln, id, &largest); done {
		return r, rerr
	}
	if err == nil {
		err = errors.New("no reply in the pipe")
	}
	return nil, err
}

// response is a relay's reply as the transport returns it.
func response(r frame.Reply, err error) (*transport.Response, error) {
	if err != nil {
		return nil, err
	}
	return &transport.Response{Status: r.Status, Body: r.Body}, nil
}

// openFIFO opens path non-blocking and hands it to Go's poller; anything
// but a FIFO is refused, so a stray regular file never receives frames.
func openFIFO(path string, mode int) (*os.File, fileKey, error) {
	fd, err := unix.Open(path, mode|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileKey{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fileKey{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(fd)
		return nil, fileKey{}, &os.PathError{Op: "open", Path: path, Err: errors.New("not a FIFO")}
	}
	// A non-blocking descriptor makes os.NewFile register it with the
	// poller: reads and writes park a goroutine and honour deadlines.
	return os.NewFile(uintptr(fd), path), keyOf(&st), nil
}

// dropStale feeds the decoder what resp holds now, before a request is
// sent, and drops it: whole replies, and one still arriving (skipped to
// its end as it comes, see frame.Decoder.Abandon).
func (c *Client) dropStale(ln *lane, resp *os.File) error {
	left, err := readNow(resp)
	if err != nil {
		return err
	}
	ln.dec.Feed(left)
	for {
		_, ok, err := ln.dec.Next()
		if err != nil {
			ln.dec.Reset()
			break
		}
		if !ok {
			break
		}
	}
	begun := ln.dec.Buffered()
	if len(left) > 0 {
		c.log.Info("fifoclient: dropped stale reply bytes", "pipe", ln.resp, "bytes", len(left), "begun", begun)
	}
	if begun < frame.HeaderSize {
		// Less than a header: debris (a relay writes a frame's header
		// with its first bytes), not a frame whose rest will follow.
		ln.dec.Reset()
	} else {
		ln.dec.Abandon()
	}
	ln.dec.Compact(keepDecoder)
	return nil
}

// readNow returns what the pipe holds right now, without waiting for
// more, up to readSize bytes (a pipe's usual buffer): the rest of a reply
// still streaming in stays in the pipe, for the decoder to skip as it is
// read.
func readNow(f *os.File) ([]byte, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var buf [4096]byte
	var out []byte
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Read(int(fd), buf[:])
			if n > 0 {
				out = append(out, buf[:n]...)
				if len(out) >= readSize {
					return true
				}
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
	return out, err
}

// cause prefers the context's reason (timeout or cancellation) over the
// deadline error the poller reports when the context ended.
func cause(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.Cause(ctx)
	}
	return err
}
