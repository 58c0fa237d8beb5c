// Package fifoclient is the daemon's side of the FIFO relay: it carries a
// transport.Request as one frame through <relay_dir>/req*.fifo and reads the
// answer from the sibling resp*.fifo.
//
// It decides how a request becomes a frame (the wire.RelayRequest envelope
// with a request id), which pipe pair a lane uses, and which reply is the
// answer: with ids, a reply to any other request (a timed-out one, or one
// from a previous run) is drained and discarded, never taken. The envelope
// codec itself, shared with the spool transport, which carries the same
// frames as files, is wirecore/frame's (AppendRequest, ParseReply).
//
// It does not decide retries or backoff (the daemon core does), nor create
// the pipes (whoever provisions the daemon runs mkfifo).
//
// A lane opens the response pipe non-blocking (O_RDWR) and then the
// request pipe O_WRONLY|O_NONBLOCK, where ENXIO means no relay holds it
// open (ErrNoRelay), and keeps both open from one request to the next:
// per request it looks both paths up (a pair replaced under its names is
// opened afresh), drops stale bytes from the response pipe, writes the
// frame in one write and reads frames until its own arrives. After a
// failure it closes both, and the next request opens them again. A relay
// that exits with a request in flight is noticed on the request pipe, as
// POLLERR, at that moment (the relay sends nothing to say so). Both files
// are on Go's poller, so a wait parks a goroutine, never an OS thread, and
// context cancellation and the request timeout interrupt it.
//
// It needs a POSIX system: on Windows, New refuses with an error that
// says so (pipe_windows.go).
package fifoclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
)

// ReplyMode says how the relay answers.
type ReplyMode string

const (
	// ReplyID: requests carry an id and replies come back as
	// wire.RelayReply envelopes naming it. Our relay's mode.
	ReplyID ReplyMode = "id"
	// ReplyRaw: no id; the reply is the upstream's raw body, as
	// docs/protocol.md ("Raw reply") pins. For a relay that predates ids; a
	// reply to an abandoned request cannot be told apart, so Timeout must
	// exceed the relay's upstream timeout.
	ReplyRaw ReplyMode = "raw"
)

// ErrNoRelay means no relay holds the request pipe open.
var ErrNoRelay = errors.New("no relay is reading")

// StallTimeout is how long a lane stays closed after a frame was cut off
// mid-write: it exceeds the relay's default frame stall timeout (30 s), so
// the relay has discarded the partial frame before our next one arrives,
// rather than reading our next bytes as the rest of it.
const StallTimeout = 31 * time.Second

// Config configures a Client.
type Config struct {
	// Dir is the machine directory, <prefix>/<machine_id>.
	Dir string
	// Timeout bounds one request, write to reply; 0 means transport.RelayedTimeout.
	Timeout time.Duration
	// Replies is ReplyID (the default when empty) or ReplyRaw.
	Replies ReplyMode
	// IDs supplies request ids; nil means frame.NewIDs(time.Now(),
	// crypto/rand.Reader).
	IDs *frame.IDs
	// Logger receives discarded replies and cut-off frames; nil discards.
	Logger *slog.Logger
}

// Client is a transport.Transport over a FIFO pair per lane. It is safe for
// concurrent use; requests on one lane go one at a time, since the relay
// serves a pair serially and replies on a shared pipe must not be read by
// the wrong waiter.
type Client struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	lanes map[transport.Lane]*lane
}

// lane is one pipe pair. The one-slot channel is a lock a waiter can give
// up on when its context ends.
type lane struct {
	slot         chan struct{}
	req, resp    string
	buf          []byte // reused frame encoding buffer
	rbuf         []byte // reused read buffer
	dec          frame.Decoder
	respKey      fileKey // the resp pipe dec reads
	stalledUntil time.Time
	open         *openPair // the pipes, while open (see exchange)
}

// fileKey identifies an inode, to notice a pipe replaced under its name.
type fileKey struct{ dev, ino uint64 }

var laneName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// New returns a client for cfg. It does not touch the pipes: a relay may
// start after the daemon.
func New(cfg Config) (*Client, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, errors.New("fifoclient: no relay directory")
	}
	switch cfg.Replies {
	case "":
		cfg.Replies = ReplyID
	case ReplyID, ReplyRaw:
	default:
		return nil, fmt.Errorf("fifoclient: reply mode %q: want id or raw", cfg.Replies)
	}
	var log *slog.Logger
	cfg.Timeout, cfg.IDs, log = transport.RelayedDefaults(cfg.Timeout, cfg.IDs, cfg.Logger)
	return &Client{cfg: cfg, log: log, lanes: map[transport.Lane]*lane{}}, nil
}

// Paths returns the request and response pipes of a lane: req.fifo and
// resp.fifo for transport.LanePoll, req.<lane>.fifo and resp.<lane>.fifo
// otherwise.
func Paths(dir string, l transport.Lane) (req, resp string) {
	if l == transport.LanePoll {
		return filepath.Join(dir, "req.fifo"), filepath.Join(dir, "resp.fifo")
	}
	return filepath.Join(dir, "req."+string(l)+".fifo"), filepath.Join(dir, "resp."+string(l)+".fifo")
}

func (c *Client) lane(l transport.Lane) (*lane, error) {
	if l != transport.LanePoll && !laneName.MatchString(string(l)) {
		return nil, fmt.Errorf("fifoclient: lane %q: want [A-Za-z0-9_-]+", l)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ln := c.lanes[l]
	if ln == nil {
		req, resp := Paths(c.cfg.Dir, l)
		ln = &lane{slot: make(chan struct{}, 1), req: req, resp: resp}
		c.lanes[l] = ln
	}
	return ln, nil
}

// CanWithdraw implements transport.Transport: a frame once written is the
// relay's to forward, and cancelling only abandons its reply.
func (*Client) CanWithdraw() bool { return false }

// RoundTrip implements transport.Transport. A nil error comes with the
// control plane's response, whatever its status; no relay, a relay that
// could not reach the control plane, a timeout or a cancelled ctx are
// errors.
func (c *Client) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	ln, err := c.lane(req.Lane)
	if err != nil {
		return nil, err
	}
	// The wait for the lane and the wait for the reply are bounded apart:
	// a reply's timeout that had run while its request queued behind
	// others could end before the relay's upstream timeout, and in raw
	// mode the next request would then take its reply.
	wait, stopWait := transport.WithReplyTimeout(ctx, c.cfg.Timeout)
	select {
	case ln.slot <- struct{}{}:
		stopWait()
	case <-wait.Done():
		defer stopWait()
		return nil, fmt.Errorf("fifoclient: %s: waiting for lane %q: %w", req.Endpoint, req.Lane, context.Cause(wait))
	}
	defer func() { <-ln.slot }()
	ctx, cancel := transport.WithReplyTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if until := ln.stalledUntil; time.Now().Before(until) {
		return nil, fmt.Errorf("fifoclient: %s: lane %q closed until %s after a cut-off frame", ln.req, req.Lane, until.Format(time.RFC3339))
	}
	id := ""
	if c.cfg.Replies == ReplyID {
		id = c.cfg.IDs.Next()
	}
	env := req.Envelope(id)
	if ln.buf, err = frame.AppendRequest(ln.buf[:0], env); err != nil {
		return nil, fmt.Errorf("fifoclient: %w", err)
	}
	resp, err := c.exchange(ctx, ln, id)
	if err != nil {
		return nil, fmt.Errorf("fifoclient: %s %s: %w", ln.req, req.Endpoint, err)
	}
	return resp, nil
}
