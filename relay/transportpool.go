//go:build unix

package relay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// perTransport is how many requests one net/http Transport carries at once
// before the pool gives the next one to another. It is HTTP/2's
// recommended floor for a server's SETTINGS_MAX_CONCURRENT_STREAMS, so one
// connection per transport holds them all whatever the server allows.
//
// Why not one transport: past a connection's stream limit net/http dials
// another connection, and with short requests a stream frees up before the
// dial completes, so the new connection is thrown away and the next
// request dials again. At 1,000 pairs of small frames one transport dialled
// 820–1,800 TLS connections and carried 10–15k frames/s; this pool dialled
// 10 and carried 18–23k (BenchmarkThroughputTLS).
const perTransport = 100

// transportPool carries each request on the first of its transports with
// fewer than perTransport requests in flight, adding a transport when all
// are full. Filling the first ones first keeps their connections busy and
// lets the later ones' connections go idle and close.
type transportPool struct {
	build         func(maxConns int) *http.Transport
	perConns      int // each transport's connection bound (0: none)
	maxTransports int // bound on transports (0: none)

	all atomic.Pointer[[]*pooledTransport] // grows only; read without the lock
	mu  sync.Mutex                         // serialises growth
}

type pooledTransport struct {
	t        *http.Transport
	inFlight atomic.Int32
	// connected is closed once the transport's first request (the one it
	// was made for) has its connection, or ended without one. Until then
	// the others wait:
	// net/http dials a connection per request that finds none, before it
	// knows the first one speaks HTTP/2, so a thousand pumps starting at
	// once would cost the upstream a thousand TLS handshakes where a few
	// connections will do.
	connected chan struct{}
	opened    sync.Once
}

func (pt *pooledTransport) open() { pt.opened.Do(func() { close(pt.connected) }) }

// newTransportPool returns a pool whose transports together hold at most
// maxConns connections (0: no bound), the relay's descriptor budget for
// the upstream: HTTP/1.1 through a proxy holds a connection per request.
func newTransportPool(maxConns int, build func(maxConns int) *http.Transport) *transportPool {
	p := &transportPool{build: build}
	if maxConns > 0 {
		p.maxTransports = max(1, maxConns/perTransport)
		p.perConns = max(1, maxConns/p.maxTransports)
	}
	p.all.Store(&[]*pooledTransport{})
	return p
}

func (p *transportPool) RoundTrip(req *http.Request) (*http.Response, error) {
	pt, made := p.take()
	if made {
		defer pt.open()
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { pt.open() }}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	} else {
		select {
		case <-pt.connected:
		case <-req.Context().Done():
			pt.inFlight.Add(-1)
			return nil, context.Cause(req.Context())
		}
	}
	resp, err := pt.t.RoundTrip(req)
	if err != nil {
		pt.inFlight.Add(-1)
		return nil, err
	}
	resp.Body = &pooledBody{ReadCloser: resp.Body, pt: pt}
	return resp, nil
}

// take picks a transport and counts the request in it; made says the
// transport was made for this request.
func (p *transportPool) take() (pt *pooledTransport, made bool) {
	for {
		all := *p.all.Load()
		for _, pt := range all {
			for n := pt.inFlight.Load(); n < perTransport; n = pt.inFlight.Load() {
				if pt.inFlight.CompareAndSwap(n, n+1) {
					return pt, false
				}
			}
		}
		if pt, made := p.grow(len(all)); pt != nil {
			return pt, made
		}
	}
}

// grow adds a transport with this request counted in it, unless another
// caller grew the pool since it was read with seen transports (then the
// caller looks again) or the pool is at its bound (then the least busy
// transport takes the request over its share).
func (p *transportPool) grow(seen int) (pt *pooledTransport, made bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	all := *p.all.Load()
	if len(all) != seen {
		return nil, false
	}
	if p.maxTransports > 0 && len(all) >= p.maxTransports {
		least := all[0]
		for _, pt := range all[1:] {
			if pt.inFlight.Load() < least.inFlight.Load() {
				least = pt
			}
		}
		least.inFlight.Add(1)
		return least, false
	}
	pt = &pooledTransport{t: p.build(p.perConns), connected: make(chan struct{})}
	pt.inFlight.Store(1)
	grown := append(append(make([]*pooledTransport, 0, len(all)+1), all...), pt)
	p.all.Store(&grown)
	return pt, true
}

// CloseIdleConnections closes every transport's idle connections.
func (p *transportPool) CloseIdleConnections() {
	for _, pt := range *p.all.Load() {
		pt.t.CloseIdleConnections()
	}
}

// pooledBody ends its request's count in the pool when closed.
type pooledBody struct {
	io.ReadCloser
	pt   *pooledTransport
	once sync.Once
}

func (b *pooledBody) Close() error {
	b.once.Do(func() { b.pt.inFlight.Add(-1) })
	return b.ReadCloser.Close()
}
