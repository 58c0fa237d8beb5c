package shellexec

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// finalFlushAttempts is how many times the last chunk is offered before
// its bytes are given up; earlier failures only delay bytes to the next
// flush, this one would otherwise hold the result forever.
const finalFlushAttempts = 3

// finalRetryDelay spaces those attempts; short, because the result waits.
const finalRetryDelay = 100 * time.Millisecond

// shipper is the sink of a streaming exec: both streams are appended, as
// produced, to one buffer that is posted to the LogSink URL whenever it
// reaches flushBytes or flushEvery has elapsed.
type shipper struct {
	in   chan []byte
	done chan struct{}
	// quit is closed when the exec is being stopped; dropped counts the
	// bytes the loop then took and could not keep.
	quit     chan struct{}
	quitOnce sync.Once
	dropped  atomic.Int64
	log      *slog.Logger
}

func newShipper(ctx context.Context, ls *wire.LogSink, opt Options, log *slog.Logger) *shipper {
	s := &shipper{in: make(chan []byte, 16), done: make(chan struct{}), quit: make(chan struct{}), log: log}
	l := &shipLoop{
		parent: ctx,
		// Chunk posts outlive a shutdown cancel: the output of a killed
		// exec is still worth delivering before the result.
		ctx:               context.WithoutCancel(ctx),
		url:               ls.StdoutURL,
		poster:            opt.Poster,
		log:               log,
		flushBytes:        int(ls.FlushBytes),
		flushEvery:        time.Duration(ls.FlushMS) * time.Millisecond,
		maxBuffered:       opt.MaxBuffered,
		shutdownPostGrace: opt.ShutdownPostGrace,
	}
	if l.flushBytes <= 0 {
		l.flushBytes = DefaultFlushBytes
	}
	if l.flushEvery <= 0 {
		l.flushEvery = DefaultFlushEvery
	}
	if l.maxBuffered < l.flushBytes {
		l.maxBuffered = l.flushBytes
	}
	if l.poster == nil {
		log.Warn("streaming exec without a chunk poster; its output is dropped", "url", l.url)
	}
	go func() { defer close(s.done); l.loop(s.in, s.quit, &s.dropped) }()
	return s
}

// write copies p: the reader reuses its buffer. It waits while the
// loop's buffer is full (back-pressure on the child), until the exec is
// being stopped (stopping): the loop then takes and drops what does not
// fit.
func (s *shipper) write(_ int, p []byte) {
	s.in <- append([]byte(nil), p...)
}

func (s *shipper) stopping() { s.quitOnce.Do(func() { close(s.quit) }) }

// close is called once both readers have stopped; it returns when the last
// chunk has been posted or given up.
func (s *shipper) close() {
	close(s.in)
	<-s.done
	if n := s.dropped.Load(); n > 0 {
		s.log.Warn("exec log output dropped while its group was stopped: the chunk posts were failing", "bytes", n)
	}
}

type shipLoop struct {
	parent      context.Context
	ctx         context.Context
	url         string
	poster      ChunkPoster
	log         *slog.Logger
	flushBytes  int
	flushEvery  time.Duration
	maxBuffered int
	// shutdownPostGrace bounds each post once the exec's context is done.
	shutdownPostGrace time.Duration
	buf               []byte
}

func (l *shipLoop) loop(in <-chan []byte, quit <-chan struct{}, dropped *atomic.Int64) {
	tick := time.NewTicker(l.flushEvery)
	defer tick.Stop()
	quitting := false
	for {
		recv, full := in, len(l.buf) >= l.maxBuffered
		if full && !quitting {
			// Back-pressure: the child blocks on its writes until a post
			// succeeds, instead of the daemon growing without bound. Not
			// once the exec is being stopped: then what does not fit is
			// dropped, so its group's output reaches its end.
			recv = nil
		}
		select {
		case <-quit:
			quitting, quit = true, nil
		case p, ok := <-recv:
			if !ok {
				l.finalFlush()
				return
			}
			if full {
				dropped.Add(int64(len(p)))
				continue
			}
			l.buf = append(l.buf, p...)
			if len(l.buf) >= l.flushBytes {
				l.flush()
			}
		case <-tick.C:
			if len(l.buf) > 0 {
				l.flush()
			}
		}
	}
}

// flush posts the whole buffer; on failure the bytes stay for the next one.
func (l *shipLoop) flush() bool {
	if l.poster == nil {
		l.buf = l.buf[:0]
		return true
	}
	ctx := l.ctx
	if l.parent.Err() != nil {
		// Shutting down: still post, but do not hold the exit for long.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(l.ctx, l.shutdownPostGrace)
		defer cancel()
	}
	// In pieces a plane takes: what piled up while posts failed (an
	// outage) may be more than one chunk's limit, and posting it whole
	// would be refused 413 for good.
	for len(l.buf) > 0 {
		piece := l.buf[:min(len(l.buf), wire.MaxChunkBodyBytes)]
		if err := l.poster.PostChunk(ctx, l.url, piece); err != nil {
			l.log.Warn("exec log chunk not delivered; kept for the next flush", "bytes", len(l.buf), "err", err)
			return false
		}
		l.buf = l.buf[:copy(l.buf, l.buf[len(piece):])]
	}
	return true
}

func (l *shipLoop) finalFlush() {
	for attempt := 1; len(l.buf) > 0; attempt++ {
		if l.flush() {
			return
		}
		if attempt == finalFlushAttempts {
			l.log.Error("exec log chunk dropped after repeated failures", "bytes", len(l.buf))
			return
		}
		time.Sleep(min(l.flushEvery, finalRetryDelay))
	}
}
