//go:build unix

package relay

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/frame"
)

// A streamed body (a frame over the head's 64 KiB) to an upstream that
// takes the connection and never reads is cut off by the upstream
// timeout like any call: the daemon gets its relay_error, and the pipe is
// back in step for the next frame.
func TestStreamedBodyUnreadUpstreamTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn // open, never read
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Setenv("HTTP_PROXY", "")
	_, d := relayOnOnePair(t, "http://"+ln.Addr().String(), func(c *Config) { c.UpstreamTimeout = time.Second })
	resp, req := d.openForTest(t)
	// More than the sockets between here and the upstream hold.
	body := bytes.Repeat([]byte("x"), 64<<20)
	wrote := make(chan error, 1)
	go func() {
		req.SetWriteDeadline(time.Now().Add(deadline))
		_, err := req.Write(frame.Append(nil, envelope(t, "/v1/daemon/ack", "a1", body)))
		wrote <- err
	}()
	rep := decodeReply(t, readFrame(t, resp))
	if err := <-wrote; err != nil {
		t.Fatalf("write the frame: %v", err)
	}
	if rep.ID != "a1" || rep.RelayError == nil || !strings.Contains(rep.RelayError.Message, "no answer within 1s") {
		t.Fatalf("reply = %+v (%+v), want a1's relay_error naming the 1 s timeout", rep, rep.RelayError)
	}
}
