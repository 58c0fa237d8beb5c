package blobcache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitWaiters blocks until n callers wait on the flight for sha.
func waitWaiters(t *testing.T, c *Cache, sha string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.fmu.Lock()
		got := 0
		if f := c.flights[sha]; f != nil {
			got = f.waiters
		}
		c.fmu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers waiting, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConcurrentFetchDownloadsOnce(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(256<<10, 11)
	sha := digest(b)
	var calls atomic.Int32
	release := make(chan struct{})
	download := func(ctx context.Context) (io.ReadCloser, error) {
		calls.Add(1)
		// Held until every caller has joined, so none can arrive after
		// the entry exists and be served by its own Lookup instead.
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}

	const n = 16
	type result struct {
		path string
		hit  bool
		err  error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			p, hit, err := c.Fetch(context.Background(), sha, download, 0)
			results <- result{p, hit, err}
		}()
	}
	waitWaiters(t, c, sha, n)
	close(release)
	var path string
	for range n {
		r := <-results
		if r.err != nil || r.hit {
			t.Fatalf("Fetch = %v, %v; want a downloaded entry", r.hit, r.err)
		}
		if path == "" {
			path = r.path
		} else if r.path != path {
			t.Fatalf("paths %s and %s", path, r.path)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d downloads, want 1", got)
	}
	if data, err := os.ReadFile(path); err != nil || !bytes.Equal(data, b) {
		t.Fatalf("entry differs (err %v)", err)
	}
	if _, hit, err := c.Fetch(context.Background(), sha, download, 0); err != nil || !hit || calls.Load() != 1 {
		t.Fatalf("later Fetch = %v, %v after %d downloads; want a hit", hit, err, calls.Load())
	}
	c.fmu.Lock()
	left := len(c.flights)
	c.fmu.Unlock()
	if left != 0 {
		t.Fatalf("%d flights left", left)
	}
}

// Fetches of different digests do not wait for each other.
func TestFetchDistinctDigestsInParallel(t *testing.T) {
	c, _ := open(t, 0)
	x, y := payload(1000, 12), payload(1000, 13)
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	dl := func(b []byte) func(context.Context) (io.ReadCloser, error) {
		return func(ctx context.Context) (io.ReadCloser, error) {
			started.Done()
			select {
			case <-both: // the other download is under way too
			case <-time.After(10 * time.Second):
				return nil, errors.New("downloads were serialised")
			}
			return io.NopCloser(bytes.NewReader(b)), nil
		}
	}
	errs := make(chan error, 2)
	for _, b := range [][]byte{x, y} {
		go func() {
			_, _, err := c.Fetch(context.Background(), digest(b), dl(b), 0)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// One caller giving up does not fail the others waiting on the same
// download; when the last one gives up the download is cancelled and
// nothing is kept.
func TestFetchCancellation(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(100_000, 14)
	sha := digest(b)
	var calls atomic.Int32
	release := make(chan struct{})
	dlCtx := make(chan context.Context, 4)
	download := func(ctx context.Context) (io.ReadCloser, error) {
		calls.Add(1)
		dlCtx <- ctx
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}

	quitter, quit := context.WithCancel(context.Background())
	quitErr := make(chan error, 1)
	go func() {
		_, _, err := c.Fetch(quitter, sha, download, 0)
		quitErr <- err
	}()
	stayer := make(chan error, 1)
	go func() {
		_, _, err := c.Fetch(context.Background(), sha, download, 0)
		stayer <- err
	}()
	waitWaiters(t, c, sha, 2)
	quit()
	if err := <-quitErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v", err)
	}
	first := <-dlCtx
	if first.Err() != nil {
		t.Fatal("the download was cancelled while a caller still waited")
	}
	close(release)
	if err := <-stayer; err != nil {
		t.Fatalf("remaining caller got %v", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d downloads, want 1", calls.Load())
	}

	// Everyone gives up: the download's context ends, nothing is kept.
	c2, _ := open(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c2.Fetch(ctx, sha, func(ctx context.Context) (io.ReadCloser, error) {
			dlCtx <- ctx
			<-ctx.Done()
			return nil, ctx.Err()
		}, 0)
		done <- err
	}()
	got := <-dlCtx
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch = %v, want context.Canceled", err)
	}
	select {
	case <-got.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("download not cancelled once its last caller left")
	}
	// The abandoned flight winds down; a new caller then downloads anew.
	p, hit, err := c2.Fetch(context.Background(), sha, func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, 0)
	if err != nil || hit {
		t.Fatalf("Fetch after abandonment = %s, %v, %v", p, hit, err)
	}
	if left := tempFiles(t, c2); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestFetchDownloadError(t *testing.T) {
	c, _ := open(t, 0)
	boom := errors.New("403 Forbidden")
	sha := digest([]byte("x"))
	_, _, err := c.Fetch(context.Background(), sha, func(context.Context) (io.ReadCloser, error) { return nil, boom }, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("Fetch = %v, want %v", err, boom)
	}
	if _, _, err := c.Fetch(context.Background(), "nope", nil, 0); err == nil {
		t.Fatal("Fetch of a bad digest accepted")
	}
	assertEmpty(t, c, sha)
}
