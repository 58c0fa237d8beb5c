// Package testkit holds what tests across the repository share: waiting,
// under a bound and with a failure that says what never happened, for a
// condition, a file or the end of a process; a buffer that goroutines may
// write logs into while a test reads them; the id reply a relay writes,
// for tests that play the relay; and acks sent through a transport at
// once, each checked against its own reply.
//
// Only _test.go files import it. It decides nothing about nymph itself.
package testkit

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// poll is how often the waits look again: short against the bounds they
// are given, long enough not to spin.
const poll = 5 * time.Millisecond

// WaitUntil returns once cond holds, and fails the test when it has not
// within the bound; what names the condition in the failure.
func WaitUntil(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(poll)
	}
}

// WaitFile returns once path exists.
func WaitFile(t testing.TB, within time.Duration, path string) {
	t.Helper()
	WaitUntil(t, within, path+" to appear", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// WaitContent returns path's content once it is not empty.
func WaitContent(t testing.TB, within time.Duration, path string) []byte {
	t.Helper()
	var b []byte
	WaitUntil(t, within, path+" to be written", func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && len(b) > 0
	})
	return b
}

// WaitExited returns once every pid has ended: it no longer exists, or it
// is a zombie (it ended, and its parent has not reaped it yet).
func WaitExited(t testing.TB, within time.Duration, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		WaitUntil(t, within, fmt.Sprintf("pid %d to end", pid), func() bool { return Exited(pid) })
	}
}

// SyncBuffer is a bytes.Buffer that goroutines may write to while a test
// reads it, for capturing a logger's or a child process's output.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RelayIDReply is the payload of the id reply a relay writes for request
// id (docs/protocol.md, "Id reply").
func RelayIDReply(id string, status int, body string) []byte {
	b, err := (&wire.RelayReply{ID: id, Status: wire.Int(status), Body: []byte(body)}).MarshalMsg(nil)
	if err != nil {
		panic(err) // a RelayReply always encodes
	}
	return b
}
