// Package spoolclient is the daemon's side of the spool relay transport:
// each request is a file in <relay_dir>/spool/req and its reply a file in
// <relay_dir>/spool/resp, for daemons on hosts that share only a
// filesystem with the relay (a FIFO's data never leaves its kernel).
//
// It decides the daemon's half of the spool layout: a request is written to
// req/<id>.tmp, fsynced, and renamed to req/<id>.frame, so the relay never
// sees a partial file; the reply is looked up by exact name,
// resp/<id>.frame, polled at an interval (a lookup, not a listing, because
// NFS caches directory listings longer than it caches names), read, and
// removed. A request given up on (timeout or cancellation) is removed. The
// frame bytes are those of the FIFO transport, envelope with id.
//
// It does not decide retries or backoff (the daemon core does) and does not
// serve requests (the relay does).
//
// On NFS, mount with lookupcache=positive (so a reply's name is found as
// soon as it exists rather than after the negative-lookup cache expires)
// and actimeo=1; the round trip then costs about two poll intervals.
package spoolclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/frame"
)

// DefaultInterval is how often a waiting request looks for its reply.
const DefaultInterval = 100 * time.Millisecond

// Config configures a Client.
type Config struct {
	// Dir is the machine directory, <prefix>/<machine_id>; the spool is
	// Dir/spool.
	Dir string
	// Interval between looks for a reply; 0 means DefaultInterval.
	Interval time.Duration
	// Timeout bounds one request; 0 means transport.RelayedTimeout.
	Timeout time.Duration
	// IDs supplies request ids; nil means frame.NewIDs(time.Now(),
	// crypto/rand.Reader).
	IDs *frame.IDs
	// Logger receives cleanup failures; nil discards.
	Logger *slog.Logger
}

// Client is a transport.Transport over spool files. It is safe for
// concurrent use, and requests do not wait for each other: ids differ, so
// several are in flight at once.
type Client struct {
	cfg       Config
	log       *slog.Logger
	req, resp string
}

// New creates Dir/spool/req and Dir/spool/resp when missing and sweeps
// files a previous run left behind (see Sweep).
func New(cfg Config) (*Client, error) {
	if cfg.Dir == "" {
		return nil, errors.New("spoolclient: no relay directory")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	var log *slog.Logger
	cfg.Timeout, cfg.IDs, log = transport.RelayedDefaults(cfg.Timeout, cfg.IDs, cfg.Logger)
	c := &Client{
		cfg: cfg, log: log,
		req:  filepath.Join(cfg.Dir, "spool", "req"),
		resp: filepath.Join(cfg.Dir, "spool", "resp"),
	}
	for _, d := range []string{c.req, c.resp} {
		if err := mkdirGroup(d); err != nil {
			return nil, fmt.Errorf("spoolclient: %w", err)
		}
	}
	c.Sweep(time.Now().Add(-2 * cfg.Timeout))
	return c, nil
}

// mkdirGroup creates d (and its parents) when missing. d itself is made
// group-writable whatever the umask, as the relay may run as another user
// of the group and creates and removes files in it; a directory that was
// there is left as its owner made it.
func mkdirGroup(d string) error {
	if _, err := os.Stat(d); err == nil {
		return nil
	}
	if err := os.MkdirAll(d, 0o770); err != nil {
		return err
	}
	return os.Chmod(d, 0o770)
}

// CanWithdraw implements transport.Transport: a request file the relay
// has picked up is forwarded whatever happens to it after, so cancelling
// only abandons the reply (removing the file withdraws a request only
// while the relay has not seen it).
func (*Client) CanWithdraw() bool { return false }

// RoundTrip implements transport.Transport.
func (c *Client) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	id := c.cfg.IDs.Next()
	env := req.Envelope(id)
	buf, err := frame.AppendRequest(nil, env)
	if err != nil {
		return nil, fmt.Errorf("spoolclient: %w", err)
	}
	ctx, cancel := transport.WithReplyTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if err := c.put(id, buf); err != nil {
		return nil, fmt.Errorf("spoolclient: %s: %w", req.Endpoint, err)
	}
	resp, err := c.await(ctx, id)
	if err != nil {
		c.giveUp(id)
		return nil, fmt.Errorf("spoolclient: %s %s: %w", req.Endpoint, id, err)
	}
	return resp, nil
}

// put writes the request under a temporary name, syncs it, and renames it
// into place: the relay only ever sees complete frames.
func (c *Client) put(id string, frameBytes []byte) (err error) {
	tmp := filepath.Join(c.req, id+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o660)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(frameBytes); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.req, id+".frame"))
}

// await polls for resp/<id>.frame until it holds a whole frame.
func (c *Client) await(ctx context.Context, id string) (*transport.Response, error) {
	path := filepath.Join(c.resp, id+".frame")
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-tick.C:
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		payload, _, err := frame.Split(data)
		var cut *frame.TruncatedError
		if errors.As(err, &cut) {
			// The relay renames whole files into place; a short read is a
			// client cache catching up, so look again.
			c.log.Debug("spoolclient: reply not complete yet", "path", path, "have", cut.Have, "want", cut.Want)
			continue
		}
		if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			c.log.Warn("spoolclient: remove reply", "path", path, "err", rmErr)
		}
		if err != nil {
			return nil, fmt.Errorf("reply %s: %w", path, err)
		}
		r, mine, err := frame.ParseReply(payload, id)
		if !mine {
			return nil, fmt.Errorf("reply %s: not a reply to %s", path, id)
		}
		if err != nil {
			return nil, err
		}
		return &transport.Response{Status: r.Status, Body: r.Body}, nil
	}
}

// giveUp removes what a request abandoned leaves: the request, unless the
// relay took it already, and a reply that raced with the give-up.
func (c *Client) giveUp(id string) {
	for _, p := range []string{
		filepath.Join(c.req, id+".frame"),
		filepath.Join(c.req, id+".tmp"),
		filepath.Join(c.resp, id+".frame"),
	} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("spoolclient: clean up abandoned request", "path", p, "err", err)
		}
	}
}

// Sweep removes request files and replies last modified before cutoff: no
// request of a live daemon is that old, so they are left from requests
// given up on by a previous run or answered after a give-up. The relay's
// half-written reply files (resp/*.tmp) are its own and are not touched.
func (c *Client) Sweep(cutoff time.Time) {
	for _, dir := range []string{c.req, c.resp} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			c.log.Warn("spoolclient: sweep", "dir", dir, "err", err)
			continue
		}
		for _, e := range ents {
			name := e.Name()
			ours := strings.HasSuffix(name, ".frame") || dir == c.req && strings.HasSuffix(name, ".tmp")
			if !ours {
				continue
			}
			info, err := e.Info()
			if err != nil || !info.ModTime().Before(cutoff) {
				continue
			}
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				c.log.Warn("spoolclient: sweep", "path", filepath.Join(dir, name), "err", err)
			}
		}
	}
}
