//go:build unix

package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counts sums the pool's in-flight counts and lists them per transport.
func (p *transportPool) counts() (total int32, each []int32) {
	for _, pt := range *p.all.Load() {
		n := pt.inFlight.Load()
		total += n
		each = append(each, n)
	}
	return total, each
}

// transports reports how many transports the pool made.
func (p *transportPool) transports() int { return len(*p.all.Load()) }

// postThrough posts an empty request to url through p and reads the reply.
func postThrough(t *testing.T, p *transportPool, url string) {
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	resp, err := p.RoundTrip(req)
	if err != nil {
		t.Error(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// parkRequests sends n requests through p to an upstream that holds them
// until release is called, and waits until the upstream holds want of them.
func parkRequests(t *testing.T, p *transportPool, n, want int) (release func(), done *sync.WaitGroup) {
	t.Helper()
	var arrived atomic.Int32
	gate := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-gate
		io.WriteString(w, "ok")
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(release) // runs first: the server's Close waits for its handlers
	done = &sync.WaitGroup{}
	for range n {
		done.Add(1)
		go func() {
			defer done.Done()
			postThrough(t, p, srv.URL)
		}()
	}
	for deadline := time.Now().Add(deadline); arrived.Load() < int32(want); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the upstream, want %d", arrived.Load(), n, want)
		}
	}
	time.Sleep(20 * time.Millisecond) // no more than want arrive
	if got := arrived.Load(); got != int32(want) {
		t.Fatalf("%d of %d requests reached the upstream, want %d", got, n, want)
	}
	return release, done
}

func TestTransportPoolKeepsEachTransportUnderItsShare(t *testing.T) {
	p := newTransportPool(0, newTransport)
	release, done := parkRequests(t, p, 250, 250)
	total, each := p.counts()
	if total != 250 || p.transports() != 3 {
		t.Fatalf("250 requests in flight: counted %d over %d transports %v, want 250 over 3", total, p.transports(), each)
	}
	for _, n := range each {
		if n > perTransport {
			t.Fatalf("a transport carries %d requests, over %d: %v", n, perTransport, each)
		}
	}
	release()
	done.Wait()
	if total, each := p.counts(); total != 0 {
		t.Fatalf("after every body was closed: %d still counted %v", total, each)
	}
	p.CloseIdleConnections()
}

// With a connection bound (the relay's descriptor budget), the pool makes
// no more transports than the bound allows; requests past it are counted
// on the least busy transport and, over HTTP/1.1, wait there for one of
// its connections.
func TestTransportPoolBoundSendsOverflowToTheLeastBusy(t *testing.T) {
	p := newTransportPool(2*perTransport, newTransport)
	release, done := parkRequests(t, p, 2*perTransport+20, 2*perTransport)
	total, each := p.counts()
	if p.transports() != 2 || total != 2*perTransport+20 {
		t.Fatalf("bound of 2 transports: %d transports, counts %v", p.transports(), each)
	}
	if d := each[0] - each[1]; d > 1 || d < -1 {
		t.Fatalf("overflow not spread to the least busy: %v", each)
	}
	release()
	done.Wait()
	if total, each := p.counts(); total != 0 {
		t.Fatalf("after every body was closed: %d still counted %v", total, each)
	}
}

func TestTransportPoolCountsFailedRequestsOut(t *testing.T) {
	refused := errors.New("refused")
	p := newTransportPool(0, func(maxConns int) *http.Transport {
		t := newTransport(maxConns)
		t.DialContext = func(context.Context, string, string) (net.Conn, error) { return nil, refused }
		return t
	})
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/", nil)
		if _, err := p.RoundTrip(req); !errors.Is(err, refused) {
			t.Fatalf("round trip: %v, want the dial error", err)
		}
	}
	if total, _ := p.counts(); total != 0 || p.transports() != 1 {
		t.Fatalf("after 3 failures: %d counted over %d transports, want 0 over 1", total, p.transports())
	}
}

// A fresh transport's first request opens the connection the others then
// share (HTTP/2): fifty requests at once cost the upstream one handshake,
// not fifty.
func TestTransportPoolDialsOnceForABurst(t *testing.T) {
	url, transport := tlsPlane(t)
	var dials atomic.Int32
	p := newTransportPool(0, func(int) *http.Transport {
		tr := transport()
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dial(ctx, network, addr)
		}
		return tr
	})
	defer p.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			postThrough(t, p, url)
		}()
	}
	wg.Wait()
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for a burst of 50 requests over HTTP/2, want 1", n)
	}
}
