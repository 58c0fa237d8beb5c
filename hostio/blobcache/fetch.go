package blobcache

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// errAbandoned marks the result of a download whose every caller had gone
// away (so it was cancelled). A caller that joined just as it was being
// abandoned did not cancel anything itself, so it starts a new one.
var errAbandoned = errors.New("blobcache: download abandoned by all its callers")

// flight is the context a download for one digest runs under and the number
// of Fetch calls waiting on it. It does not belong to any one caller: the
// first caller's cancellation must not fail the others, so the download
// stops only when the last caller waiting on it has gone.
type flight struct {
	ctx     context.Context
	cancel  context.CancelFunc
	waiters int
}

// fetched is a download's result, shared by every caller of one flight.
type fetched struct {
	path string
	hit  bool
}

// Fetch returns the verified entry for sha, downloading it on a miss.
//
// It looks sha up; on a miss, one download per digest runs at a time in
// this process: callers that arrive while one is under way wait for it
// rather than download again. download is called with a context that is
// cancelled once every caller waiting on it has given up; its body is
// inserted with want = sha and max as the limit (see Insert), then closed.
// hit is true when the entry was already in the cache, so no download was
// made for this caller (neither its own nor one it waited for).
//
// A caller whose ctx ends stops waiting and gets ctx's error; the download
// goes on for the others.
func (c *Cache) Fetch(ctx context.Context, sha string, download func(ctx context.Context) (io.ReadCloser, error), max int64) (path string, hit bool, err error) {
	s, err := canonical(sha)
	if err != nil {
		return "", false, fmt.Errorf("blobcache: fetch: %w", err)
	}
	if p, ok, err := c.Lookup(s); err != nil || ok {
		return p, ok, err
	}
	for {
		f := c.join(ctx, s)
		ch := c.sf.DoChan(s, func() (any, error) { return c.fill(f, s, download, max) })
		select {
		case <-ctx.Done():
			c.leave(s, f)
			return "", false, fmt.Errorf("blobcache: fetch %s: %w", s, context.Cause(ctx))
		case res := <-ch:
			c.leave(s, f)
			if res.Err != nil {
				if errors.Is(res.Err, errAbandoned) && ctx.Err() == nil {
					continue
				}
				return "", false, res.Err
			}
			r := res.Val.(fetched)
			return r.path, r.hit, nil
		}
	}
}

// join counts the caller in the current flight for sha, starting one when
// there is none. The flight keeps ctx's values but not its cancellation.
func (c *Cache) join(ctx context.Context, sha string) *flight {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	f := c.flights[sha]
	if f == nil {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{ctx: fctx, cancel: cancel}
		c.flights[sha] = f
	}
	f.waiters++
	return f
}

// leave counts the caller out; the last one out cancels the flight, and a
// later caller starts a new one.
func (c *Cache) leave(sha string, f *flight) {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	f.waiters--
	if f.waiters == 0 {
		f.cancel()
		if c.flights[sha] == f {
			delete(c.flights, sha)
		}
	}
}

// fill is one flight's work: look again (a flight that ended between the
// caller's Lookup and this one may have inserted it), then download and
// insert.
func (c *Cache) fill(f *flight, sha string, download func(context.Context) (io.ReadCloser, error), max int64) (any, error) {
	if p, ok, err := c.Lookup(sha); err != nil {
		return nil, err
	} else if ok {
		return fetched{path: p, hit: true}, nil
	}
	abandoned := func(err error) error {
		if f.ctx.Err() != nil {
			return fmt.Errorf("%w: %w", errAbandoned, err)
		}
		return err
	}
	body, err := download(f.ctx)
	if err != nil {
		return nil, abandoned(fmt.Errorf("blobcache: fetch %s: download: %w", sha, err))
	}
	if body == nil {
		return nil, fmt.Errorf("blobcache: fetch %s: download returned no body", sha)
	}
	p, _, size, err := c.Insert(f.ctx, body, sha, max)
	if cerr := body.Close(); cerr != nil && err == nil {
		// The bytes are in and verified; a failing close says nothing
		// about them.
		c.log.Debug("blobcache: close download", "sha256", sha, "err", cerr)
	}
	if err != nil {
		return nil, abandoned(err)
	}
	c.log.Debug("blobcache: downloaded", "sha256", sha, "size", size, "path", p)
	return fetched{path: p}, nil
}
