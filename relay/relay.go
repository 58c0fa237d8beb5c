//go:build unix

// Package relay is the relay process: it watches a prefix of machine
// directories, pumps request frames from each daemon's FIFOs and spool
// files to the control plane, and delivers the replies.
//
// It decides how pipes are found (a scan, then inotify), how each one is
// read (one non-blocking fd in Go's poller per pipe, one parked goroutine),
// which frames are forwarded (the allow-list of package policy), what
// carries them upstream (internal/inlinehttp on the pump's own goroutine for
// a cleartext upstream, net/http's HTTP/2 client for https or a proxy), that
// an https upstream is verified (TLS 1.3, by the CA file or the system's
// roots: hostio/tlsca), what it tells the daemons behind it of that
// upstream (PREFIX/relay-upstream.json, wire.RelayUpstream), how
// replies are addressed (by request id when the frame carries one, raw
// otherwise), and how it shuts down (stop reading, a grace for requests in
// flight, 503 for the rest).
//
// It does not create pipes, decode the bodies it forwards, retry, or track
// daemons: it is a byte-mover with one bearer of its own.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/hostio/instancelock"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/relay/policy"
	"github.com/nymphd/nymph/relay/token"
	"golang.org/x/sys/unix"
)

// Relay is one relay process's state.
type Relay struct {
	cfg     Config
	log     *slog.Logger
	root    *root
	up      *upstream
	metrics *Metrics

	// hard is cancelled when the shutdown grace ends: upstream requests
	// still running are cut off and answered 503.
	hard       context.Context
	cancelHard context.CancelFunc

	ready chan struct{} // closed after the first scan
	pumps sync.WaitGroup
	spool spoolSet

	// replyFDs counts reply pipes kept open between replies; keptLimit
	// bounds them together with the pumps' request pipes (0: no bound).
	replyFDs  atomic.Int64
	keptLimit int64
	// warnedUnheld is set once the relay has said that a reply pipe could
	// not be held.
	warnedUnheld atomic.Bool
	idle         idleRelease
}

// idleRelease gives memory back to the system once the relay has gone
// quiet after carrying frames. A burst through thousands of pairs grows
// every pump's stack (the upstream call runs on it) and the heap (frame
// buffers), and the runtime keeps what it freed for the next burst: at
// 10,000 pairs, each answered once, that held 170 MiB where 65 MiB are in
// use. The collector shrinks stacks and the scavenger returns pages only
// as the heap grows again, which an idle relay's never does; so after
// idleQuiet without a new frame the relay collects and returns the free
// pages, at most once per idleReleaseEvery (a few milliseconds of CPU).
type idleRelease struct {
	frames   uint64    // the frame count at the last tick
	moved    time.Time // when it last changed; zero once released
	released time.Time
	release  func() // debug.FreeOSMemory outside tests
}

// releaseMemory collects until the pumps' stacks are back to their idle
// size (each collection halves a stack using under a quarter of it, and
// a burst leaves them 4 to 8 times too big) and sync.Pool's buffers are
// gone (two collections), then returns the free pages to the system.
func releaseMemory() {
	for range 3 {
		runtime.GC()
	}
	debug.FreeOSMemory()
}

const (
	idleQuiet        = 2 * time.Second
	idleReleaseEvery = time.Minute
)

// tick looks at the frame count; it runs on the discovery loop.
func (ir *idleRelease) tick(now time.Time, frames uint64) {
	if frames != ir.frames {
		ir.frames, ir.moved = frames, now
		return
	}
	if ir.moved.IsZero() || now.Sub(ir.moved) < idleQuiet || now.Sub(ir.released) < idleReleaseEvery {
		return
	}
	ir.moved, ir.released = time.Time{}, now
	ir.release()
}

// New checks the configuration (token file mode, upstream URL, prefix) and
// returns a relay ready to Run.
func New(cfg Config) (*Relay, error) {
	cfg = withDefaults(cfg)
	base, err := policy.ParseBase(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	tok, err := token.Open(cfg.TokenFile, cfg.TokenCheck, time.Now, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	rt, err := openRoot(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	var transport http.RoundTripper
	switch {
	case cfg.Client == nil:
		tlsCfg, err := tlsca.ClientConfig(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		transport = defaultTransport(base, upstreamConnBound(), http.ProxyFromEnvironment, tlsCfg)
	case cfg.Client.Transport == nil:
		transport = http.DefaultTransport
	default:
		transport = cfg.Client.Transport
	}
	hard, cancel := context.WithCancel(context.Background())
	rl := &Relay{
		cfg:        cfg,
		log:        cfg.Logger,
		root:       rt,
		up:         &upstream{transport: transport, base: base, token: tok.Token, timeout: cfg.UpstreamTimeout},
		metrics:    newMetrics(time.Now()),
		hard:       hard,
		cancelHard: cancel,
		ready:      make(chan struct{}),
		keptLimit:  cfg.PipeBudget,
		idle:       idleRelease{release: releaseMemory},
	}
	rl.spool.init()
	return rl, nil
}

func withDefaults(cfg Config) Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.FrameTimeout, DefaultFrameTimeout)
	def(&cfg.UpstreamTimeout, DefaultUpstreamTimeout)
	def(&cfg.SpoolInterval, DefaultSpoolInterval)
	def(&cfg.ShutdownGrace, DefaultShutdownGrace)
	def(&cfg.TokenCheck, DefaultTokenCheck)
	if cfg.PipeBudget <= 0 {
		cfg.PipeBudget = keptPipeBound()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Metrics returns the relay's counters (served by Metrics.Handler).
func (rl *Relay) Metrics() *Metrics { return rl.metrics }

// Ready is closed once the first scan of the prefix is done: every pipe
// that existed at start is being pumped.
func (rl *Relay) Ready() <-chan struct{} { return rl.ready }

// Run pumps until ctx is done, then shuts down: no new frame is read,
// requests in flight get the shutdown grace, what finished is answered and
// the rest gets a 503. It returns nil after a clean shutdown.
func (rl *Relay) Run(ctx context.Context) error {
	defer rl.root.close()
	// One relay per prefix: two would both read each request pipe, and a
	// frame would go to whichever read first, its reply to the other.
	lock, err := instancelock.Acquire(rl.cfg.Prefix, "relay prefix", "give this relay another --prefix")
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer lock.Release()
	d, err := newDiscovery(rl)
	if err != nil {
		return err
	}
	if err := rl.writeUpstreamFile(); err != nil {
		return err
	}
	d.pending = []pendingPair{}
	d.scanAll()
	d.startPending()
	close(rl.ready)
	rl.log.Info("relay: watching", "prefix", rl.root.path, "upstream", rl.up.base.String(),
		"transport", fmt.Sprintf("%T", rl.up.transport),
		"pumps", rl.metrics.pumps.Load(), "spool_dirs", rl.metrics.spoolDirs.Load())
	d.loop(ctx)
	rl.shutdown(d)
	if t, ok := rl.up.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}

// shutdown stops every pump from reading a new frame, waits the grace for
// those in flight, then cuts off the rest.
func (rl *Relay) shutdown(d *discovery) {
	d.close()
	for _, p := range d.allPumps() {
		p.stop()
	}
	done := make(chan struct{})
	go func() { rl.pumps.Wait(); rl.spool.wait(); close(done) }()
	timer := time.NewTimer(rl.cfg.ShutdownGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		rl.log.Info("relay: shutdown grace over; answering the rest 503")
		rl.cancelHard()
		for _, p := range d.allPumps() {
			p.kill()
		}
		<-done
	}
	rl.cancelHard()
	rl.log.Info("relay: stopped")
}

func (rl *Relay) hardStopped() bool { return rl.hard.Err() != nil }

// RaiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: each pipe
// pair costs one fd, and thousands of pairs need more than the usual 1024.
func RaiseFileLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("relay: getrlimit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("relay: setrlimit: %w", err)
		}
	}
	return lim.Cur, nil
}

var errNotLoopback = errors.New("the status listener must be a loopback address")

// keptPipeBound is how many pipes the pumps may hold open at once, their
// request pipes and the reply pipes they keep between replies: the
// open-file limit less the upstream's quarter and a reserve for
// listeners, spool files and the rest. 10,000 pairs fit in 20,000
// descriptors with a reply pipe kept for about half of them; past the
// bound a reply pipe is closed after each reply, as DESIGN's contract has
// it, which costs an open(2) per reply rather than an EMFILE.
func keptPipeBound() int64 {
	lim, ok := openFileLimit()
	if !ok {
		return 0
	}
	return pipeBudget(lim)
}

// pipeBudget is keptPipeBound under open-file limit lim; FileLimitFor
// is its inverse (a test holds the two together).
func pipeBudget(lim int64) int64 {
	// At least 1: zero would mean no bound at all.
	return max(lim-lim/4-reservedFDs, 1)
}

// openFileLimit is RLIMIT_NOFILE's soft limit (which Go raises to the hard
// one at start); false when unknown or unlimited.
func openFileLimit() (int64, bool) {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil || lim.Cur == unix.RLIM_INFINITY {
		return 0, false
	}
	return int64(lim.Cur), true
}

// keepReplyFD reserves room to keep one more reply pipe open, and reports
// whether there was any.
func (rl *Relay) keepReplyFD() bool { return rl.reserveReplyFD(0) }

// reserveReplyFD is keepReplyFD for a pump about to start, whose request
// pipe does not count among the pumps yet, nor those of the pumps the
// first scan will start after it: extra counts them all.
func (rl *Relay) reserveReplyFD(extra int64) bool {
	n := rl.replyFDs.Add(1)
	if rl.keptLimit > 0 && n+rl.metrics.pumps.Load()+extra > rl.keptLimit {
		rl.replyFDs.Add(-1)
		return false
	}
	return true
}

// replyPipeUnheld records that a starting pump could not hold respRel
// open: the open-file budget is spent. Its daemon must open resp
// non-blocking; a plain blocking open waits until the relay writes a
// reply, which it does only after a request. The first time, the relay
// says so and how to make room; later pairs are counted in /status.
func (rl *Relay) replyPipeUnheld(respRel string) {
	rl.metrics.unheld.Add(1)
	if rl.warnedUnheld.Swap(true) {
		rl.log.Debug("relay: reply pipe not held: the open-file budget is spent", "pipe", respRel)
		return
	}
	lim, _ := openFileLimit()
	rl.log.Warn("relay: the open-file budget is spent; this and further pairs open their reply pipe per reply, "+
		"so their daemons must open resp.fifo non-blocking (see unheld_reply_pipes in /status). "+
		"Raise the limit to more than twice the pairs (ulimit -n, or LimitNOFILE= in the systemd unit)",
		"pipe", respRel, "open_file_limit", lim, "pipe_budget", rl.keptLimit, "pumps", rl.metrics.pumps.Load())
}

// upstreamConnBound leaves three quarters of the open-file limit to pipes
// and replies: with 20,000 descriptors, 10,000 idle pairs and 5,000
// HTTP/1.1 requests in flight fit together.
func upstreamConnBound() int {
	lim, ok := openFileLimit()
	if !ok {
		return 0
	}
	return int(max(lim/4, 16))
}
