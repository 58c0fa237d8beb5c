package inlinehttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is a test server that counts the connections it accepted.
type upstream struct {
	*httptest.Server
	accepted atomic.Int32
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(h)
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.accepted.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

func post(t *testing.T, tr *Transport, ctx context.Context, url string, body io.Reader) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

// call posts body and reads the whole reply.
func call(t *testing.T, tr *Transport, url, body string) string {
	t.Helper()
	resp, err := post(t, tr, context.Background(), url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, readReply(t, resp))
}

// readReply reads a response body whole and closes it.
func readReply(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// streamedRequest posts payload as a reader of known length that is not a
// *bytes.Reader, so the body is streamed rather than sent from memory.
func streamedRequest(t *testing.T, url string, payload []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, io.MultiReader(bytes.NewReader(payload)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(payload))
	return req
}

// idleConns is how many connections tr keeps for reuse.
func (t *Transport) idleConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nIdle
}

// wantIdle fails the test unless tr keeps n connections for reuse.
func wantIdle(t testing.TB, tr *Transport, n int, when string) {
	t.Helper()
	if got := tr.idleConns(); got != n {
		t.Fatalf("%d idle connections %s, want %d", got, when, n)
	}
}

func echo(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s", r.URL.Path, data)
}

func TestRequestsReuseOneConnection(t *testing.T) {
	u := newUpstream(t, echo)
	tr := New(Options{})
	for i := range 5 {
		if got, want := call(t, tr, u.URL+"/a", fmt.Sprint(i)), fmt.Sprintf("200 /a %d", i); got != want {
			t.Fatalf("reply %q, want %q", got, want)
		}
	}
	if n := u.accepted.Load(); n != 1 {
		t.Fatalf("%d connections for 5 sequential requests, want 1", n)
	}
	wantIdle(t, tr, 1, "after sequential requests")
}

// Idle connections are kept per address: a request to one upstream never
// goes out on a connection to another.
func TestIdleConnectionsArePerAddress(t *testing.T) {
	a, b := newUpstream(t, echo), newUpstream(t, echo)
	tr := New(Options{})
	for i := range 3 {
		for _, u := range []*upstream{a, b} {
			if got, want := call(t, tr, u.URL+"/"+u.Listener.Addr().String(), fmt.Sprint(i)),
				fmt.Sprintf("200 /%s %d", u.Listener.Addr(), i); got != want {
				t.Fatalf("reply %q, want %q", got, want)
			}
		}
	}
	if na, nb := a.accepted.Load(), b.accepted.Load(); na != 1 || nb != 1 {
		t.Fatalf("connections accepted: %d and %d, want one each", na, nb)
	}
	wantIdle(t, tr, 2, "after a request to each upstream")
	tr.CloseIdleConnections()
	wantIdle(t, tr, 0, "after CloseIdleConnections")
}

func TestConnectionClosedWhileIdleIsNotUsed(t *testing.T) {
	u := newUpstream(t, echo)
	tr := New(Options{})
	call(t, tr, u.URL+"/a", "x")
	// The upstream drops its idle connections (as an idle timeout would).
	u.CloseClientConnections()
	time.Sleep(20 * time.Millisecond) // let the FIN arrive
	if got := call(t, tr, u.URL+"/b", "y"); got != "200 /b y" {
		t.Fatalf("reply after the upstream closed the idle connection: %q", got)
	}
	if n := u.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the closed one replaced)", n)
	}
}

func TestCancelInterruptsAQuietUpstream(t *testing.T) {
	release := make(chan struct{})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
	})
	defer close(release)
	tr := New(Options{})
	why := errors.New("the daemon gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancel(why) })
	start := time.Now()
	_, err := post(t, tr, ctx, u.URL, strings.NewReader("x"))
	if !errors.Is(err, why) {
		t.Fatalf("error %v, want the cancel cause", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	wantIdle(t, tr, 0, "after an interrupted connection")
}

func TestCancelDuringTheBodyClosesTheConnection(t *testing.T) {
	release := make(chan struct{})
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("head"))
		w.(http.Flusher).Flush()
		<-release
	})
	defer close(release)
	tr := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := post(t, tr, ctx, u.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("read a body past the cancel")
	}
	resp.Body.Close()
	wantIdle(t, tr, 0, "after an interrupted connection")
}

func TestConnectionBoundQueuesCallers(t *testing.T) {
	u := newUpstream(t, echo)
	tr := New(Options{MaxConns: 1})
	resp, err := post(t, tr, context.Background(), u.URL, strings.NewReader("first"))
	if err != nil {
		t.Fatal(err)
	}
	// The only connection is busy until the first body is closed.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := post(t, tr, ctx, u.URL, strings.NewReader("second")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second request past the bound: %v, want to wait until its deadline", err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := call(t, tr, u.URL+"/c", "third"); got != "200 /c third" {
		t.Fatalf("reply once the connection was free: %q", got)
	}
	// A failed dial gives its slot back.
	tr2 := New(Options{MaxConns: 1, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("refused")
	}})
	for range 3 {
		if _, err := post(t, tr2, context.Background(), u.URL, nil); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("dial failure: %v", err)
		}
	}
}

func TestUnreadOrClosingResponsesAreNotReused(t *testing.T) {
	big := strings.Repeat("z", 64<<10)
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, big)
	})
	tr := New(Options{})
	resp, err := post(t, tr, context.Background(), u.URL+"/partial", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	wantIdle(t, tr, 0, "after a body left unread")
	call(t, tr, u.URL+"/close", "")
	wantIdle(t, tr, 0, "after the upstream closed its connection")
	call(t, tr, u.URL+"/full", "")
	wantIdle(t, tr, 1, "after a whole body")
}

func TestInformationalResponsesAreSkipped(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</x>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "done")
	})
	if got := call(t, New(Options{}), u.URL, ""); got != "202 done" {
		t.Fatalf("reply %q, want the final response", got)
	}
}

func TestChunkedReplyAndLargeStreamedRequest(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		for _, part := range []string{"len=", fmt.Sprint(n, r.ContentLength), " sum=", fmt.Sprintf("%x", h.Sum(nil))} {
			io.WriteString(w, part)
			w.(http.Flusher).Flush() // chunked
		}
	})
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	tr := New(Options{})
	resp, err := tr.RoundTrip(streamedRequest(t, u.URL, payload))
	if err != nil {
		t.Fatal(err)
	}
	data := readReply(t, resp)
	want := fmt.Sprintf("len=%d %d sum=%x", len(payload), len(payload), sha256.Sum256(payload))
	if string(data) != want || len(resp.TransferEncoding) == 0 {
		t.Fatalf("reply %q (transfer %v), want %q chunked", data, resp.TransferEncoding, want)
	}
	wantIdle(t, tr, 1, "after a chunked reply")
}

func TestIdleConnectionsExpire(t *testing.T) {
	u := newUpstream(t, echo)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	tr := New(Options{IdleTimeout: time.Minute, Now: clock})
	call(t, tr, u.URL, "a")
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	call(t, tr, u.URL, "b")
	if n := u.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the one idle past the timeout is not reused", n)
	}
	wantIdle(t, tr, 1, "once one is past the idle timeout")
	tr.CloseIdleConnections()
	wantIdle(t, tr, 0, "after CloseIdleConnections")
}

func TestOnlyCleartextHTTP(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "https://example.invalid/", nil)
	if _, err := New(Options{}).RoundTrip(req); !errors.Is(err, ErrScheme) {
		t.Fatalf("https URL: %v, want ErrScheme", err)
	}
}

// BenchmarkRoundTrip compares a small POST through this transport and
// through net/http's, one caller at a time.
//
//	go test -run '^$' -bench RoundTrip ./relay/internal/inlinehttp/
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	url := srv.URL
	body := bytes.Repeat([]byte("a"), 100)
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{{"inline", New(Options{})}, {"nethttp", &http.Transport{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// An upstream that answers before it has read the whole body (here, a
// limit it enforces) has that answer returned, not the broken pipe.
func TestAnswerBeforeTheBodyIsReturned(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.CopyN(io.Discard, r.Body, 1<<10)
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, "body over 1 KiB")
	})
	tr := New(Options{})
	resp, err := tr.RoundTrip(streamedRequest(t, u.URL, bytes.Repeat([]byte("x"), 64<<20)))
	if err != nil {
		t.Fatalf("round trip: %v, want the upstream's 413", err)
	}
	data := readReply(t, resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || string(data) != "body over 1 KiB" {
		t.Fatalf("reply %d %q", resp.StatusCode, data)
	}
	wantIdle(t, tr, 0, "after a request cut off")
}
