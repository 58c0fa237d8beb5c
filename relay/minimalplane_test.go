//go:build unix

package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// minimalReply is what the minimal plane answers to every request.
const minimalReply = "HTTP/1.1 200 OK\r\nContent-Type: application/msgpack\r\nContent-Length: 2\r\n\r\nok"

// minimalServer is the smallest HTTP/1.1 upstream that answers like
// answerAtOnce: it reads each request's head and its whole body (sized or
// chunked) and answers 200 "ok", one goroutine per connection, keep-alive.
//
// It exists for the throughput benchmarks, which measure the relay and so
// need an upstream that is not the bottleneck. net/http's server does more
// per request than parse and answer (header maps, a goroutine per request
// watching for the client going away), and in the benchmark's own process
// that work shares the two vCPUs with the relay and the stand-in daemons:
// against it one pair through the relay carries less than half of what it
// does here (BenchmarkThroughputNetHTTPPlane). The direct requests beside
// the relay's meet the same upstream, so the comparison stays fair.
//
// It refuses what it does not parse (a bad head, a bad length) by closing
// the connection, which a benchmark reports as an error.
type minimalServer struct {
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// serve answers connections from ln until it is closed.
func (s *minimalServer) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.conns = map[net.Conn]bool{}
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.answer(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// answer serves one connection until the client closes it or sends what
// cannot be parsed.
func (s *minimalServer) answer(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		if err := readMinimalRequest(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, minimalReply); err != nil {
			return
		}
	}
}

// closeConns closes every open connection, idle keep-alive ones too, and
// waits for their goroutines.
func (s *minimalServer) closeConns() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// readMinimalRequest reads one request head and discards its body.
func readMinimalRequest(br *bufio.Reader) error {
	size, chunked := int64(0), false
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if first {
			if !bytes.HasSuffix(line, []byte(" HTTP/1.1")) {
				return fmt.Errorf("request line %q", line)
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return fmt.Errorf("header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case strings.EqualFold(string(name), "Content-Length"):
			if size, err = strconv.ParseInt(string(value), 10, 64); err != nil || size < 0 {
				return fmt.Errorf("content-length %q", value)
			}
		case strings.EqualFold(string(name), "Transfer-Encoding"):
			if !strings.EqualFold(string(value), "chunked") {
				return fmt.Errorf("transfer-encoding %q", value)
			}
			chunked = true
		}
	}
	if chunked {
		_, err := io.Copy(io.Discard, httputil.NewChunkedReader(br))
		if err != nil {
			return err
		}
		// The chunked reader stops at the last chunk; the trailer section
		// (empty here) ends with one more line.
		_, err = br.ReadSlice('\n')
		return err
	}
	_, err := br.Discard(int(size))
	return err
}

// minimalPlane starts a minimalServer on a loopback port and returns its URL.
func minimalPlane(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var srv minimalServer
	done := make(chan struct{})
	go func() {
		srv.serve(ln)
		close(done)
	}()
	tb.Cleanup(func() {
		ln.Close()
		<-done
		srv.closeConns()
	})
	return "http://" + ln.Addr().String()
}

// TestMinimalPlaneSpeaksHTTP holds the benchmarks' upstream to what a real
// one does: net/http's client gets 200 "ok" and keeps its connection;
// sized, chunked and empty bodies are read whole, so the next request on
// the connection is answered too; a request it cannot parse gets no
// answer.
func TestMinimalPlaneSpeaksHTTP(t *testing.T) {
	url := minimalPlane(t)
	dials := 0
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for i := range 3 {
		resp, err := c.Post(url+"/v1/daemon/ack", defaultContentType, bytes.NewReader(bytes.Repeat([]byte("a"), 100)))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(got) != "ok" {
			t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, got, err)
		}
	}
	if dials != 1 {
		t.Fatalf("%d dials for 3 requests, want 1 (keep-alive)", dials)
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(deadline))
	io.WriteString(conn, "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n"+
		"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"+
		"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	want := strings.Repeat(minimalReply, 3)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
		t.Fatalf("three requests on one connection: %q, %v", got, err)
	}
	io.WriteString(conn, "POST /d HTTP/1.1\r\nContent-Length: -3\r\n\r\n")
	if n, err := conn.Read(make([]byte, 64)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after a bad length: %d bytes, %v; want the connection closed", n, err)
	}
}
