package blobstore

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/planeserver"
)

// servedBlobs is a blob store behind serve (adjusted by tweak), and the
// address it listens on.
func servedBlobs(t *testing.T, tweak func(*planeserver.Config)) (*Store, string) {
	p := newPlaneFixtureWith(t, tweak)
	return p.blobs, p.srv.Listener.Addr().String()
}

func rawPut(t *testing.T, addr, target string, hdr string, parts [][]byte, gap time.Duration) (string, time.Duration) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	u, _ := url.Parse(target)
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: plane\r\nContent-Type: application/octet-stream\r\n%s\r\n", u.RequestURI(), hdr)
	start := time.Now()
	go func() {
		for _, p := range parts {
			if _, err := c.Write(p); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %q", resp.StatusCode, strings.TrimSpace(string(b))), time.Since(start)
}

// An upload whose client stalls is answered 408 naming the bound it
// missed, as every body is; it is the client's pace, not a fault of the
// store (500).
func TestStalledPutIs408(t *testing.T) {
	s, addr := servedBlobs(t, func(c *planeserver.Config) { c.BodyIdleTimeout = time.Second })
	put, err := s.Presign(planeserver.Presign{Namespace: "ns", Op: "put", Key: "k1", Size: 1000}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := rawPut(t, addr, put.URL, "Content-Length: 1000\r\n", [][]byte{make([]byte, 10)}, 0)
	if !strings.HasPrefix(got, "408") || !strings.Contains(got, "no byte") {
		t.Fatalf("stalled PUT answered %s, want 408 naming the idle bound", got)
	}
}

// A chunked upload gets the whole-body bound of its route's limit, as
// every chunked body does (docs/protocol.md, "Bodies"), not the bare base:
// one sent well above the rate floor is taken.
func TestChunkedPutHasItsRoutesWholeBodyBound(t *testing.T) {
	s, addr := servedBlobs(t, func(c *planeserver.Config) { c.BodyTimeout = 2 * time.Second })
	put, err := s.Presign(planeserver.Presign{Namespace: "ns", Op: "put", Key: "k2"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var parts [][]byte
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for range 64 { // 4 MiB at about 1 MiB/s: past the 2 s base
		parts = append(parts, []byte(fmt.Sprintf("%x\r\n%s\r\n", len(chunk), chunk)))
	}
	parts = append(parts, []byte("0\r\n\r\n"))
	got, _ := rawPut(t, addr, put.URL, "Transfer-Encoding: chunked\r\n", parts, 60*time.Millisecond)
	if !strings.HasPrefix(got, "200") {
		t.Fatalf("chunked 4 MiB PUT answered %s, want 200", got)
	}
}
