package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pump reads frames from one req*.fifo and answers on its resp*.fifo. Idle,
// it is one goroutine parked in Go's poller on one non-blocking fd, holding
// nothing bigger than a frame header.
type pump struct {
	rl      *Relay
	f       *os.File
	raw     syscall.RawConn // f's descriptor, for a read that must not wait
	resp    int             // the resp pipe's write end; -1 when closed
	kept    bool            // resp is kept between replies, counted in rl.replyFDs
	key     fileKey
	reqRel  string
	respRel string
	ctx     context.Context // cancelled when the pump is removed
	cancel  context.CancelFunc
	done    chan struct{}

	mu       sync.Mutex // guards the read deadline against stop and kill
	busy     bool       // inside a frame
	stopping bool       // shutdown: finish the frame in hand, read no new one
	killed   bool       // removed, or the shutdown grace ran out
	deadline bool       // a read deadline may be set; idle clears it

	// watch runs watchCall for the call in progress; call is what they
	// share (guarded by mu) and watchDone says the watcher ended.
	watch     *time.Timer
	watchDone chan struct{}
	call      callWatch

	hdr    [4]byte
	remain int64 // payload bytes of the current frame not read yet

	// in holds bytes read from the pipe and not consumed yet: a frame's
	// header and a small payload arrive in one read(2), and bytes of a
	// next frame found while a call ran wait here. It is taken from
	// inPool only for a read and given back once empty, so an idle pump,
	// or one waiting on a long-poll, holds none.
	in           *[]byte
	inOff, inEnd int

	rd     readCall
	readFn func(fd uintptr) bool // p.readOnce, bound once
}

// inSize is the most one buffered read takes: a small frame whole. A
// larger payload is read straight into the exchange's buffer.
const inSize = 4 << 10

var inPool = sync.Pool{New: func() any { b := make([]byte, inSize); return &b }}

func (p *pump) buffered() int { return p.inEnd - p.inOff }

// take moves buffered bytes into b and gives the buffer back once empty.
func (p *pump) take(b []byte) int {
	if p.in == nil {
		return 0
	}
	n := copy(b, (*p.in)[p.inOff:p.inEnd])
	p.inOff += n
	if p.inOff == p.inEnd {
		p.dropBuffer()
	}
	return n
}

func newPump(rl *Relay, fd int, key fileKey, reqRel, respRel string) *pump {
	// fd is non-blocking, so os.NewFile registers it with the poller.
	f := os.NewFile(uintptr(fd), filepath.Join(rl.root.path, reqRel))
	raw, _ := f.SyscallConn() // only fails on a nil or closed file
	ctx, cancel := context.WithCancel(rl.hard)
	p := &pump{rl: rl, f: f, raw: raw, resp: -1, key: key, reqRel: reqRel, respRel: respRel, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	p.readFn = p.readOnce
	return p
}

func (p *pump) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the pump to read no new frame; an idle pump returns at once.
func (p *pump) stop() {
	p.mu.Lock()
	p.stopping = true
	if !p.busy {
		p.f.SetReadDeadline(time.Unix(1, 0))
		p.deadline = true
	}
	p.mu.Unlock()
}

// kill ends the pump whatever it is doing. The pump closes its own fd, so
// no read is ever in progress on a closed descriptor.
func (p *pump) kill() {
	p.mu.Lock()
	p.killed = true
	p.f.SetReadDeadline(time.Unix(1, 0))
	p.deadline = true
	p.mu.Unlock()
	p.cancel()
}

func (p *pump) isKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// arm restarts the stall timer: a frame may take any time as long as
// bytes keep coming. It is armed only when a read mid-frame is about to
// wait (see readSome): setting a deadline wakes the runtime's netpoller
// thread, which per frame cost more than the rest of the relay's work.
func (p *pump) arm() {
	p.mu.Lock()
	if !p.killed {
		p.f.SetReadDeadline(time.Now().Add(p.rl.cfg.FrameTimeout))
		p.deadline = true
	}
	p.mu.Unlock()
}

// begin marks the pump inside a frame, so that stop lets it finish.
func (p *pump) begin() {
	p.mu.Lock()
	p.busy = true
	p.mu.Unlock()
}

// idle marks the pump between frames; it reports false when the pump must
// end instead of waiting for the next frame.
func (p *pump) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy = false
	if p.stopping || p.killed {
		return false
	}
	if p.deadline {
		p.f.SetReadDeadline(time.Time{})
		p.deadline = false
	}
	return true
}

func (p *pump) run() {
	defer func() {
		p.cancel()
		p.f.Close()
		p.closeResp()
		p.dropBuffer()
		p.rl.metrics.pumps.Add(-1)
		close(p.done)
		p.rl.pumps.Done()
	}()
	for p.idle() {
		size, ok := p.readHeader()
		if !ok {
			return
		}
		p.remain = size
		if rep, send := p.rl.serveFrame(p.ctx, p, size, ""); send {
			p.deliver(&rep)
		}
	}
}

// readHeader waits for a frame's four length bytes. A header that stalls
// midway is dropped like any partial frame.
func (p *pump) readHeader() (int64, bool) {
	n := 0
	if p.buffered() > 0 {
		p.begin() // a frame that began while the last call ran
	}
	for n < len(p.hdr) {
		if p.buffered() == 0 {
			_, err := p.readSome(nil, n > 0)
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) || p.isKilled() {
					return 0, false
				}
				if n == 0 {
					if !p.idle() {
						return 0, false // stop() woke an idle pump
					}
					continue
				}
				p.rl.metrics.fail(errStall)
				p.rl.log.Warn("relay: partial frame header dropped after the stall timer", "pipe", p.f.Name())
				n = 0
				if !p.idle() {
					return 0, false
				}
				continue
			}
			if n == 0 {
				p.begin()
			}
		}
		n += p.take(p.hdr[n:])
	}
	return int64(binary.BigEndian.Uint32(p.hdr[:])), true
}

// readSome reads what the pipe has into b, or into the input buffer when
// b is nil, waiting in the poller while the pipe has nothing. Mid-frame
// (stall), the stall timer is armed just before a wait, so a frame whose
// bytes are all there sets no timer at all.
func (p *pump) readSome(b []byte, stall bool) (int, error) {
	return p.readPipe(readCall{dst: b, stall: stall, wait: true})
}

// readPipe carries out one readCall through the poller.
func (p *pump) readPipe(rc readCall) (int, error) {
	b := rc.dst
	p.rd = rc
	err := p.raw.Read(p.readFn)
	n, rerr := p.rd.n, p.rd.err
	p.rd.dst = nil
	switch {
	case err == nil && rerr == nil && n > 0:
	case err != nil:
		rerr = err // the deadline passed, or the file is closing
	case rerr == nil:
		// The relay holds a write end itself (O_RDWR), so this is not
		// end-of-file from a writer; treat it as the pipe gone.
		rerr = errStopped
	}
	if rerr != nil {
		p.dropEmptyBuffer()
		return 0, rerr
	}
	p.rl.metrics.bytesIn.Add(uint64(n))
	if b == nil {
		p.inOff, p.inEnd = 0, n
	}
	return n, nil
}

// readCall is one readSome or peekNext in progress: what readOnce, the
// callback the poller calls with the descriptor, works on. The callback is
// bound once per pump (readFn), so a read allocates nothing.
type readCall struct {
	dst   []byte // nil: the input buffer
	stall bool   // arm the stall timer before waiting
	wait  bool   // wait for the pipe when it is empty; else one attempt
	n     int
	err   error
}

func (p *pump) readOnce(fd uintptr) bool {
	r := &p.rd
	dst := r.dst
	if dst == nil {
		p.in = inPool.Get().(*[]byte)
		dst = *p.in
	}
	for {
		r.n, r.err = unix.Read(int(fd), dst)
		if r.err != unix.EINTR {
			break
		}
	}
	if r.err == unix.EAGAIN && r.wait {
		p.dropEmptyBuffer()
		if r.stall {
			p.arm()
		}
		return false // wait for the pipe, or the deadline
	}
	return true
}

// dropBuffer gives back the input buffer, whatever it holds.
func (p *pump) dropBuffer() {
	if p.in != nil {
		inPool.Put(p.in)
		p.in, p.inOff, p.inEnd = nil, 0, 0
	}
}

// dropEmptyBuffer gives back an input buffer taken for a read that found
// nothing.
func (p *pump) dropEmptyBuffer() {
	if p.buffered() == 0 {
		p.dropBuffer()
	}
}

// Read reads the current frame's payload and never past it.
func (p *pump) Read(b []byte) (int, error) {
	if p.remain <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.remain {
		b = b[:p.remain]
	}
	if n := p.take(b); n > 0 {
		p.remain -= int64(n)
		return n, nil
	}
	n, err := p.readSome(b, true)
	p.remain -= int64(n)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && !p.isKilled() {
		return 0, errStalled
	}
	return 0, errStopped
}

// watchAfter is how long a call runs before the pump starts watching its
// pipe for abandonment. Only a long-poll runs that long; acks, results,
// chunks and a relay under load finish first and cost no watcher. A
// daemon gives up on a request only after its own timeout, well past the
// long-poll's wait, so noticing that this much later cancels the upstream
// call this much later and changes nothing else: a raw reply that comes back
// meanwhile is still dropped (see peekNext).
const watchAfter = 100 * time.Millisecond

// callWatch is what a call in progress shares with the pump's watcher.
type callWatch struct {
	timeout   time.Duration           // the upstream timeout
	deadline  time.Time               // when it passes
	cancel    context.CancelCauseFunc // ends the call
	finished  bool                    // the call returned: do not start
	abandoned bool                    // the watcher read a byte of a new frame
}

// await runs call while, once it has taken watchAfter, watching the pipe:
// the daemon writes its next frame only once it stopped waiting for this
// one's reply, so a byte arriving first means this request was abandoned.
// The watcher also enforces the upstream timeout (through its read
// deadline), so a quick call costs no timer but the watcher's own, which
// the pump keeps from frame to frame.
func (p *pump) await(call func() result, cancel context.CancelCauseFunc, timeout time.Duration, addressed bool) (result, bool) {
	p.mu.Lock()
	p.call = callWatch{timeout: timeout, deadline: time.Now().Add(timeout), cancel: cancel}
	p.mu.Unlock()
	after := min(watchAfter, timeout)
	if p.watch == nil {
		p.watchDone = make(chan struct{}, 1)
		p.watch = time.AfterFunc(after, p.watchCall)
	} else {
		p.watch.Reset(after)
	}
	res := call()
	if p.watch.Stop() {
		// The watcher never started: a byte already waiting still means
		// the daemon gave up on this request. A raw reply must then not
		// be delivered (the daemon would take it for its new request's);
		// an addressed one is told apart by its id, so it is not worth a
		// read(2) per frame to look.
		return res, !addressed && p.peekNext()
	}
	p.mu.Lock()
	p.call.finished = true
	p.f.SetReadDeadline(time.Unix(1, 0)) // ends a watch in progress
	p.deadline = true
	p.mu.Unlock()
	<-p.watchDone
	return res, p.call.abandoned
}

// watchCall is the watcher of a call that has run watchAfter: it waits for
// a byte of a new frame (the call was abandoned) or the upstream timeout,
// and cancels the call on either.
func (p *pump) watchCall() {
	defer func() { p.watchDone <- struct{}{} }()
	p.mu.Lock()
	c := p.call
	watch := !c.finished && !p.stopping && !p.killed
	if watch {
		p.f.SetReadDeadline(c.deadline)
		p.deadline = true
	}
	p.mu.Unlock()
	if !watch {
		return
	}
	if _, err := p.readSome(nil, false); err == nil {
		p.mu.Lock()
		p.call.abandoned = true
		p.mu.Unlock()
		c.cancel(errCallAbandoned)
		return
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	p.mu.Lock()
	timedOut := !p.call.finished && !p.killed
	p.mu.Unlock()
	if timedOut {
		c.cancel(errNoAnswer(c.timeout))
	}
}

// peekNext reports whether bytes of a next frame are already here: held
// in the input buffer, or in the pipe (read without waiting).
func (p *pump) peekNext() bool {
	if p.buffered() > 0 {
		return true
	}
	_, err := p.readPipe(readCall{}) // one attempt: EAGAIN is an error
	return err == nil
}

func (p *pump) discard(buf []byte) error {
	for p.remain > 0 {
		if _, err := p.Read(buf); err != nil {
			return err
		}
	}
	return nil
}

// deliver writes the reply frame to the resp pipe. No reader (ENXIO) or a
// reader gone (EPIPE) means the daemon stopped waiting: the reply is
// dropped.
func (p *pump) deliver(rep *reply) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	out, err := rep.appendFrame((*bp)[:0])
	if err != nil {
		p.rl.log.Error("relay: encode reply", "pipe", p.respRel, "err", err)
		return
	}
	if err := p.writeReply(out); err != nil {
		p.dropped(err)
		return
	}
	p.rl.metrics.replies.Add(1)
	p.rl.metrics.bytesOut.Add(uint64(len(out)))
}

// writeReply writes out to the resp pipe. While the pipe budget allows,
// the write end stays open from one reply to the next: opening a FIFO
// (with its checks) per reply was about a third of the relay's own work
// per frame. A kept end may have gone stale (the pipe was replaced), so
// EPIPE on it opens the pipe afresh once before the reply is given up.
// A reply that fits the pipe goes in one write(2), atomic when under
// PIPE_BUF; the rest waits in the poller with the stall timer, so a daemon
// that stops reading cannot hold the pump.
func (p *pump) writeReply(out []byte) error {
	for attempt := 0; ; attempt++ {
		cached := p.resp >= 0
		if !cached {
			fd, _, err := p.rl.root.openChecked(p.respRel, unix.O_WRONLY|unix.O_NONBLOCK, unix.S_IFIFO, p.rl.cfg.AllowSharedWriters)
			if err != nil {
				return err
			}
			p.resp = fd
		}
		n, err := unix.Write(p.resp, out)
		switch {
		case err == nil && n == len(out):
			if !cached && !p.rl.keepReplyFD() {
				p.closeResp() // no room to keep it: the open-file budget is spent
				return nil
			}
			p.kept = true
			return nil
		case err == nil || err == unix.EAGAIN:
			return p.writeRest(out[max(n, 0):])
		}
		p.closeResp()
		if !cached || attempt > 0 || err != unix.EPIPE {
			return err
		}
	}
}

// writeRest finishes a reply larger than the room in the pipe, through the
// poller, and lets the write end go: a large reply is rare, and its end is
// best not kept in blocking-capable hands.
func (p *pump) writeRest(out []byte) error {
	f := os.NewFile(uintptr(p.resp), p.respRel)
	p.forgetResp()
	defer f.Close()
	for len(out) > 0 {
		chunk := out[:min(len(out), headCap)]
		f.SetWriteDeadline(time.Now().Add(p.rl.cfg.FrameTimeout))
		k, err := f.Write(chunk)
		if err != nil {
			return err
		}
		out = out[k:]
	}
	return nil
}

func (p *pump) closeResp() {
	if p.resp >= 0 {
		unix.Close(p.resp)
		p.forgetResp()
	}
}

// forgetResp drops the pump's hold on its reply pipe (closed, or handed
// over), giving its place in the open-file budget back.
func (p *pump) forgetResp() {
	p.resp = -1
	if p.kept {
		p.kept = false
		p.rl.replyFDs.Add(-1)
	}
}

func (p *pump) dropped(err error) {
	p.rl.metrics.fail(errReplyDropped)
	if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EPIPE) {
		p.rl.log.Debug("relay: reply dropped; the daemon stopped waiting", "pipe", p.respRel)
		return
	}
	p.rl.log.Warn("relay: reply dropped", "pipe", p.respRel, "err", err)
}

// noticeLost tells a daemon already waiting on respRel, before this pump
// opens the request pipe, that its request is lost: it was written to a
// relay that died (or a pump that was replaced), since no daemon can reach
// this pump before the request pipe is open. The notice is a raw
// relay_error with status 0, a transport failure: a daemon answered raw
// retries at once instead of waiting out its timeout, and one using ids
// may take an id-less relay_error the same way. Nobody waiting (ENXIO) is
// the usual case and costs one open(2).
func (rl *Relay) noticeLost(respRel string) {
	fd, _, err := rl.root.openChecked(respRel, unix.O_WRONLY|unix.O_NONBLOCK, unix.S_IFIFO, rl.cfg.AllowSharedWriters)
	if err != nil {
		return
	}
	rep := reply{status: 0, message: "relay restarted: the request in flight was lost", relayErr: true}
	out, err := rep.appendFrame(nil)
	if err == nil {
		_, err = unix.Write(fd, out) // far under PIPE_BUF: one atomic write or none
	}
	unix.Close(fd)
	if err == nil {
		rl.log.Info("relay: told a waiting daemon its request was lost", "pipe", respRel)
	}
}
