//go:build unix

package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pump reads frames from one req*.fifo and answers on its resp*.fifo. Idle,
// it is one goroutine parked in Go's poller on one non-blocking fd, holding
// nothing bigger than a frame header.
type pump struct {
	rl  *Relay
	f   *os.File
	raw syscall.RawConn // f's descriptor, for a read that must not wait
	// resp is the resp pipe's descriptor, -1 when none is open. A pump that had
	// room in the pipe budget opens it O_RDWR when it starts and holds it
	// (held), so a daemon's blocking open(2) of the pipe returns at once, as
	// docs/protocol.md ("What a daemon can rely on") has it; one without room
	// opens it O_WRONLY per reply and keeps it while room appears.
	resp int
	held bool // resp was opened O_RDWR at the start
	// unheld: the budget had no room to hold resp at the start (counted in
	// the metrics until the pump ends).
	unheld bool
	kept   bool // resp counts in rl.replyFDs
	// respStale says the resp pipe was replaced under its name (discovery
	// saw it): the next reply opens the new one.
	respStale atomic.Bool
	key       fileKey
	reqRel    string
	respRel   string
	ctx       context.Context // cancelled when the pump is removed
	cancel    context.CancelFunc
	done      chan struct{}

	mu       sync.Mutex // guards the read deadline against stop and kill
	busy     bool       // inside a frame
	inHead   bool       // inside a frame not forwarded yet
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

// newPump makes the pump of the request pipe fd. resp is the reply pipe
// held since the start (O_RDWR, counted in rl.replyFDs), or -1.
func newPump(rl *Relay, fd int, key fileKey, reqRel, respRel string, resp int) *pump {
	// fd is non-blocking, so os.NewFile registers it with the poller.
	f := os.NewFile(uintptr(fd), filepath.Join(rl.root.path, reqRel))
	raw, _ := f.SyscallConn() // only fails on a nil or closed file
	ctx, cancel := context.WithCancel(rl.hard)
	p := &pump{rl: rl, f: f, raw: raw, resp: resp, held: resp >= 0, kept: resp >= 0, unheld: resp < 0,
		key: key, reqRel: reqRel, respRel: respRel, ctx: ctx, cancel: cancel, done: make(chan struct{})}
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

// stop asks the pump to read no new frame; an idle pump returns at once,
// and so does one waiting for the rest of a frame it has not forwarded
// (the shutdown grace is for requests upstream, not for daemons still
// writing). Such a frame is answered 503.
func (p *pump) stop() {
	p.mu.Lock()
	p.stopping = true
	if !p.busy || p.inHead {
		p.interrupt()
	}
	p.mu.Unlock()
}

// interrupt makes a read in progress, and the next one, return at once
// (a deadline in the past). p.mu is held.
func (p *pump) interrupt() {
	p.f.SetReadDeadline(time.Unix(1, 0))
	p.deadline = true
}

// cutOff reports that shutdown interrupted the frame being read before it
// was forwarded.
func (p *pump) cutOff() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping && p.inHead && !p.killed
}

// forwarding marks the frame in hand as on its way upstream: from here
// shutdown gives it the grace.
func (p *pump) forwarding() {
	p.mu.Lock()
	p.inHead = false
	p.mu.Unlock()
}

// kill ends the pump whatever it is doing. The pump closes its own fd, so
// no read is ever in progress on a closed descriptor.
func (p *pump) kill() {
	p.mu.Lock()
	p.killed = true
	p.interrupt()
	if c := p.call; c.cancel != nil && !c.finished {
		c.cancel(errStopped) // the call in flight is nobody's any more
	}
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
	if !p.killed && !(p.stopping && p.inHead) {
		p.f.SetReadDeadline(time.Now().Add(p.rl.cfg.FrameTimeout))
		p.deadline = true
	}
	p.mu.Unlock()
}

// begin marks the pump inside a frame, so that stop lets it finish.
func (p *pump) begin() {
	p.mu.Lock()
	p.busy = true
	p.inHead = true
	if p.stopping {
		// A frame that began as shutdown did: it is not waited for.
		p.interrupt()
	}
	p.mu.Unlock()
}

// idle marks the pump between frames; it reports false when the pump must
// end instead of waiting for the next frame.
func (p *pump) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy = false
	p.inHead = false
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
		if p.unheld {
			p.rl.metrics.unheld.Add(-1)
		}
		p.rl.metrics.pumps.Add(-1)
		close(p.done)
		p.rl.pumps.Done()
	}()
	for p.idle() {
		size, ok := p.readHeader()
		if !ok {
			return
		}
		p.serve(size)
	}
}

// serve handles the frame whose header was read. It is a call of its own
// so that its reply lives in its frame, not in run's: an idle pump parks
// with run and readHeader on its stack, which then fits the goroutine's
// first 2 KiB (10,000 idle pumps: 20 MB of stacks rather than 40).
func (p *pump) serve(size int64) {
	p.remain = size
	if rep, send := p.rl.serveFrame(p.ctx, p, size, ""); send {
		p.deliver(&rep)
	}
}

// answerCutOff answers a frame whose header shutdown cut off: the daemon
// gets its one reply, as for any frame cut off before it went up. (A call
// of its own for the same reason as serve.)
//
//go:noinline
func (p *pump) answerCutOff() {
	rep := reply{status: http.StatusServiceUnavailable, message: msgShutdown, relayErr: true}
	p.rl.metrics.fail(errShutdown)
	p.deliver(&rep)
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
				if p.cutOff() {
					p.answerCutOff()
					return 0, false
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
	return p.readPipe(readCall{dst: b, stall: stall})
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

// readCall is one readSome in progress: what readOnce, the callback the
// poller calls with the descriptor, works on. The callback is bound once
// per pump (readFn), so a read allocates nothing.
type readCall struct {
	dst   []byte // nil: the input buffer
	stall bool   // arm the stall timer before waiting
	n     int
	err   error
}

func (p *pump) readOnce(fd uintptr) bool {
	r := &p.rd
	dst := r.dst
	if dst == nil {
		if p.in == nil {
			p.in = inPool.Get().(*[]byte)
		}
		dst = *p.in // empty: only a pump with nothing buffered reads into it
	}
	for {
		r.n, r.err = unix.Read(int(fd), dst)
		if r.err != unix.EINTR {
			break
		}
	}
	if r.err == unix.EAGAIN {
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
		if p.cutOff() {
			return 0, errCutOff
		}
		return 0, errStalled
	}
	return 0, errStopped
}

// watchAfter is how long a call that carries an id runs before the pump
// starts watching its pipe for a next frame, which supersedes it. Only a
// long-poll runs that long; acks, results, chunks and a relay under load
// finish first and cost no watcher. A daemon gives up on a request only
// after its own timeout, well past the long-poll's wait, so noticing that
// this much later cancels the upstream call this much later and changes
// nothing else.
const watchAfter = 100 * time.Millisecond

// callWatch is what a call in progress shares with the pump's watcher.
type callWatch struct {
	timeout   time.Duration           // the upstream timeout
	deadline  time.Time               // when it passes
	cancel    context.CancelCauseFunc // ends the call
	addressed bool                    // the frame carries an id: a next frame supersedes it
	finished  bool                    // the call returned: do not start
	abandoned bool                    // the watcher read a byte of a new frame
}

// await runs call under the upstream timeout. A frame that carries an id is
// superseded by the next frame on its pipe: the daemon writes one only once it
// stopped waiting for this reply, so once the call has taken watchAfter, the
// watcher reads the pipe, and a byte arriving first cancels the call, whose
// reply is then not written (the daemon would discard it by its id anyway). A
// raw frame (no id) is never superseded: raw frames are answered one for one
// and in order, pipelined or not (docs/protocol.md, "What a daemon can rely
// on"), so bytes of a next frame simply wait in the pipe until this reply is
// written.
//
// The watcher also enforces the upstream timeout (through its read
// deadline, or for a raw frame by firing at the timeout), so a quick call
// costs no timer but the watcher's own, which the pump keeps from frame to
// frame.
func (p *pump) await(call func() result, cancel context.CancelCauseFunc, lim upstreamLimit, addressed bool) (result, bool) {
	p.mu.Lock()
	p.call = callWatch{timeout: lim.timeout, deadline: lim.until, cancel: cancel, addressed: addressed}
	if p.killed {
		cancel(errStopped) // removed while the frame was read
	}
	p.mu.Unlock()
	after := time.Until(lim.until)
	if addressed {
		after = min(watchAfter, after)
	}
	if p.watch == nil {
		p.watchDone = make(chan struct{}, 1)
		p.watch = time.AfterFunc(after, p.watchCall)
	} else {
		p.watch.Reset(after)
	}
	res := call()
	if p.watch.Stop() {
		p.mu.Lock()
		p.call.finished = true
		p.mu.Unlock()
		return res, false // the watcher never started
	}
	p.mu.Lock()
	p.call.finished = true
	if addressed {
		p.interrupt() // ends a watch in progress
	}
	p.mu.Unlock()
	<-p.watchDone
	return res, p.call.abandoned
}

// watchCall is the watcher of a call: for a frame with an id, started
// after watchAfter, it waits for a byte of a new frame (the call was
// superseded) or the upstream timeout and cancels the call on either; for
// a raw frame, started at the timeout, it cancels the call.
func (p *pump) watchCall() {
	defer func() { p.watchDone <- struct{}{} }()
	p.mu.Lock()
	c := p.call
	watch := !c.finished && !p.stopping && !p.killed && c.addressed
	timedOut := !c.finished && !p.killed && !c.addressed
	if watch {
		p.f.SetReadDeadline(c.deadline)
		p.deadline = true
	}
	p.mu.Unlock()
	if timedOut {
		c.cancel(errNoAnswer(c.timeout))
	}
	if !watch {
		return
	}
	// Bytes of the next frame may be in the input buffer already (read
	// with the end of this one): they are that frame, and a read here
	// would overwrite them.
	superseded := p.buffered() > 0
	var err error
	if !superseded {
		_, err = p.readSome(nil, false)
		superseded = err == nil
	}
	if superseded {
		p.mu.Lock()
		p.call.abandoned = true
		p.mu.Unlock()
		c.cancel(errCallAbandoned)
		return
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	p.mu.Lock()
	timedOut = !p.call.finished && !p.killed
	p.mu.Unlock()
	if timedOut {
		c.cancel(errNoAnswer(c.timeout))
	}
}

func (p *pump) discard(buf []byte) error {
	for p.remain > 0 {
		if _, err := p.Read(buf); err != nil {
			return err
		}
	}
	return nil
}

// deliver writes the reply frame to the resp pipe. With the pipe held
// (O_RDWR) a write always finds it; opened per reply, no reader (ENXIO) or
// a reader gone (EPIPE) means the daemon stopped waiting: the reply is
// dropped.
func (p *pump) deliver(rep *reply) {
	defer rep.done()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	out, err := rep.appendFrame((*bp)[:0])
	if err != nil {
		p.rl.log.Error("relay: encode reply", "pipe", p.respRel, "err", err)
		return
	}
	var spare []byte // the copy buffer of a streamed body: bp past the head
	if rep.stream != nil && len(out) <= cap(*bp)/2 {
		spare = (*bp)[len(out):cap(*bp)]
	}
	if err := p.writeReply(out, rep.stream, spare); err != nil {
		p.dropped(err)
		return
	}
	p.rl.metrics.replies.Add(1)
	p.rl.metrics.bytesOut.Add(uint64(len(out)) + uint64(rep.length))
}

// writeReply writes out, then the body from stream when there is one
// (copied through spare, if big enough), to the resp pipe. A reply that fits the pipe goes in one write(2), atomic
// when under PIPE_BUF; the rest waits in the poller with the stall timer,
// so a daemon that stops reading cannot hold the pump.
func (p *pump) writeReply(out []byte, stream io.Reader, spare []byte) error {
	for attempt := 0; ; attempt++ {
		fresh, err := p.openResp()
		if err != nil {
			return err
		}
		n, err := unix.Write(p.resp, out)
		switch {
		case err == nil && n == len(out) && stream == nil:
			p.keepResp(fresh)
			return nil
		case err == nil || err == unix.EAGAIN:
			err = p.writeRest(out[max(n, 0):], stream, spare)
			if err == nil {
				p.keepResp(fresh)
			}
			return err
		}
		p.closeResp()
		// A kept O_WRONLY end may have gone stale (the pipe was replaced
		// and its old reader left): open the pipe afresh once.
		if fresh || attempt > 0 || err != unix.EPIPE {
			return err
		}
	}
}

// openResp makes sure the pump has a reply descriptor: the held one
// (re-opened on a pipe replaced under its name), the one kept from the
// last reply, or a new O_WRONLY one, which it reports as fresh.
func (p *pump) openResp() (fresh bool, err error) {
	if p.respStale.Swap(false) && p.resp >= 0 {
		p.rl.log.Info("relay: reply pipe replaced; opening the new one", "pipe", p.respRel)
		held := p.held
		p.closeResp()
		if held {
			// The budget room stays taken: the new pipe is held in its place.
			if !p.rl.reserveReplyFD(0) {
				held = false
			}
		}
		p.held = held
		p.kept = held
	}
	if p.resp >= 0 {
		return false, nil
	}
	flags := unix.O_WRONLY | unix.O_NONBLOCK
	if p.held {
		flags = unix.O_RDWR | unix.O_NONBLOCK
	}
	fd, _, err := p.rl.root.openChecked(p.respRel, flags, unix.S_IFIFO, p.rl.cfg.AllowSharedWriters)
	if err != nil {
		if p.held {
			p.held, p.kept = false, false
			p.rl.replyFDs.Add(-1)
		}
		return false, err
	}
	p.resp = fd
	return !p.held, nil
}

// keepResp keeps a reply end opened for this reply while the pipe budget
// has room: opening a FIFO (with its checks) per reply was about a third
// of the relay's own work per frame.
func (p *pump) keepResp(fresh bool) {
	if !fresh {
		return
	}
	if !p.rl.keepReplyFD() {
		p.closeResp() // no room to keep it: the open-file budget is spent
		return
	}
	p.kept = true
}

// writeRest finishes a reply larger than the room in the pipe, and streams
// its body, through the poller on a duplicate of the reply descriptor. A
// write that stalls past the frame timeout leaves a partial frame in the
// pipe; on a held pipe the relay reads its own pipe empty again, so the
// next reply starts on a frame boundary for whoever reads next.
func (p *pump) writeRest(rest []byte, stream io.Reader, buf []byte) error {
	dup, err := unix.FcntlInt(uintptr(p.resp), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("dup reply pipe: %w", err)
	}
	f := os.NewFile(uintptr(dup), p.respRel) // non-blocking: on the poller
	defer f.Close()
	err = p.writeStalling(f, rest)
	if err == nil && stream != nil {
		if len(buf) < 4<<10 {
			buf = make([]byte, headCap)
		}
		for {
			n, rerr := stream.Read(buf)
			if n > 0 {
				if err = p.writeStalling(f, buf[:n]); err != nil {
					break
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				err = fmt.Errorf("read reply from upstream: %w", rerr)
				break
			}
		}
	}
	if err != nil {
		p.resync()
	}
	return err
}

// writeStalling writes b, allowing the stall timer between two bytes
// taken by the reader.
func (p *pump) writeStalling(f *os.File, b []byte) error {
	for len(b) > 0 {
		chunk := b[:min(len(b), headCap)]
		f.SetWriteDeadline(time.Now().Add(p.rl.cfg.FrameTimeout))
		k, err := f.Write(chunk)
		if err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}

// resync empties a held reply pipe after a reply cut off mid-frame (its
// reader stalled, or its body stopped coming): the relay is a reader of its
// own pipe, so it can take back the partial frame rather than leave the
// next reader a stream out of step. A pipe opened per reply is closed
// instead; its reader sees the frame cut short.
func (p *pump) resync() {
	if !p.held {
		p.closeResp()
		return
	}
	var b [4096]byte
	total := 0
	for {
		n, err := unix.Read(p.resp, b[:])
		if n > 0 {
			total += n
			continue
		}
		if err == unix.EINTR {
			continue
		}
		break
	}
	p.rl.log.Warn("relay: reply cut off mid-frame; emptied the reply pipe", "pipe", p.respRel, "bytes", total)
}

func (p *pump) closeResp() {
	if p.resp >= 0 {
		unix.Close(p.resp)
		p.resp = -1
	}
	if p.kept {
		p.kept = false
		p.rl.replyFDs.Add(-1)
	}
	p.held = false
}

func (p *pump) dropped(err error) {
	p.rl.metrics.fail(errReplyDropped)
	if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EPIPE) {
		p.rl.log.Debug("relay: reply dropped; the daemon stopped waiting", "pipe", p.respRel)
		return
	}
	p.rl.log.Warn("relay: reply dropped", "pipe", p.respRel, "err", err)
}
