//go:build unix

package relay

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/fifoclient"
	"github.com/nymphd/nymph/hostio/spoolclient"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/internal/testkit"
)

// These tests run the daemon's own transports against the relay, so the
// two sides of the contract are checked together.

func TestInteropFifoClient(t *testing.T) {
	fp := newFakePlane(t)
	prefix, dir := prefixWithPair(t)
	makePair(t, dir, string(transport.LaneControl))
	startRelay(t, prefix, fp.URL, nil)
	c, err := fifoclient.New(fifoclient.Config{Dir: dir, Timeout: deadline})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/daemon/poll", Body: []byte("p")})
	if err != nil || resp.Status != 200 || string(resp.Body) != "echo:p" {
		t.Fatalf("poll: %+v, %v", resp, err)
	}
	resp, err = c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/daemon/ack", Body: []byte("a"), Lane: transport.LaneControl,
		Headers: map[string]string{"X-LS-Signature": "s"}})
	if err != nil || resp.Status != 200 || string(resp.Body) != "echo:a" {
		t.Fatalf("ack: %+v, %v", resp, err)
	}
	resp, err = c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/daemon/hello"})
	if err != nil || resp.Status != 422 || string(resp.Body) != "bad-hello" {
		t.Fatalf("hello: %+v, %v", resp, err)
	}
	if resp, err := c.RoundTrip(ctx, &transport.Request{Endpoint: "/v1/admin/workers"}); err == nil && resp.Status != 400 {
		t.Fatalf("a disallowed endpoint: %+v", resp)
	}
	if got := fp.requests()[1].Header.Get("X-Ls-Signature"); got != "s" {
		t.Fatalf("signature header = %q", got)
	}
}

func TestInteropRelayStartedAfterDaemon(t *testing.T) {
	fp := newFakePlane(t)
	prefix, dir := prefixWithPair(t)
	c, _ := fifoclient.New(fifoclient.Config{Dir: dir, Timeout: deadline})
	_, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll"})
	if !errors.Is(err, fifoclient.ErrNoRelay) {
		t.Fatalf("before the relay: %v, want ErrNoRelay", err)
	}
	startRelay(t, prefix, fp.URL, nil)
	resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/poll", Body: []byte("x")})
	if err != nil || resp.Status != 200 {
		t.Fatalf("after the relay: %+v, %v", resp, err)
	}
}

func TestInteropSpoolClient(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	dir := filepath.Join(prefix, "remote")
	c, err := spoolclient.New(spoolclient.Config{Dir: dir, Interval: 5 * time.Millisecond, Timeout: deadline})
	if err != nil {
		t.Fatal(err)
	}
	startRelay(t, prefix, fp.URL, nil)
	testkit.AcksAtOnce(t, c, 5, func(body string) string { return "echo:" + body })
}

// TestInteropManyDaemons runs 100 daemons' transports through one relay at
// once, each on both lanes.
func TestInteropManyDaemons(t *testing.T) {
	const daemons, each = 100, 3
	fp := newFakePlane(t)
	prefix := t.TempDir()
	clients := make([]*fifoclient.Client, daemons)
	for i := range clients {
		dir := filepath.Join(prefix, fmt.Sprintf("m%03d", i))
		makePair(t, dir, "")
		makePair(t, dir, string(transport.LaneControl))
		clients[i], _ = fifoclient.New(fifoclient.Config{Dir: dir, Timeout: deadline})
	}
	startRelay(t, prefix, fp.URL, nil)
	var wg sync.WaitGroup
	for i, c := range clients {
		for _, lane := range []transport.Lane{transport.LanePoll, transport.LaneControl} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range each {
					body := fmt.Sprintf("%d-%s-%d", i, lane, j)
					resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/ack", Body: []byte(body), Lane: lane})
					if err != nil || string(resp.Body) != "echo:"+body {
						t.Errorf("daemon %d lane %q: %+v, %v", i, lane, resp, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	fp.wantSeen(t, daemons*each*2)
}

// BenchmarkSpoolRoundTrip is one request through the spool at the default
// poll intervals of both sides.
//
//	go test -run '^$' -bench SpoolRoundTrip -benchtime 20x ./relay/
func BenchmarkSpoolRoundTrip(b *testing.B) {
	fp := newFakePlane(b)
	prefix := b.TempDir()
	c, err := spoolclient.New(spoolclient.Config{Dir: filepath.Join(prefix, "remote")})
	if err != nil {
		b.Fatal(err)
	}
	startRelay(b, prefix, fp.URL, func(c *Config) { c.SpoolInterval = DefaultSpoolInterval })
	b.ResetTimer()
	for range b.N {
		resp, err := c.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/ack", Body: []byte("x")})
		if err != nil || resp.Status != 200 {
			b.Fatalf("%+v, %v", resp, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/roundtrip")
}
