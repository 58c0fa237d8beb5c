//go:build unix

package relay

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
)

// These tests run a daemon as one written to the relay framing alone
// (docs/protocol.md, "Relay framing", without the extensions) would be, in a
// process of its own: plain blocking open(2) calls on its pipes, raw frames (no
// id), replies read in step with requests; and the relay, when a test kills it,
// in a process of its own too. Both are this test binary, re-run in a role
// named by an environment variable (see TestMain).
const (
	seedDaemonEnv   = "NYMPH_RELAY_TEST_SEED_DAEMON"   // the machine directory
	relayProcessEnv = "NYMPH_RELAY_TEST_RELAY_PROCESS" // prefix|upstream|token file
)

// relayProcess runs a relay until SIGTERM, saying "ready" on stdout once
// it pumps the pipes that exist.
func relayProcess(spec string) {
	parts := strings.Split(spec, "|")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rl, err := New(Config{Prefix: parts[0], Upstream: parts[1], TokenFile: parts[2], Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { <-rl.Ready(); fmt.Println("ready") }()
	if err := rl.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// seedDaemon reads commands on stdin, one a line, and answers each with a
// line on stdout:
//
//	open resp-first | open req-first | open retry-req
//	    opens both pipes blocking (retry-req: resp blocking, then req
//	    O_NONBLOCK until the relay holds it, ENXIO meanwhile); "opened"
//	send B1 [B2 …]
//	    writes a raw frame per body back to back, then reads one reply per
//	    frame; "reply R1 R2 …". A reply pipe at end of file (the relay died)
//	    or a request pipe with no reader (EPIPE) is reopened and the frames
//	    not yet answered are sent again, as a seed daemon retries.
func seedDaemon(dir string) {
	d := &seed{dir: dir}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 2 && f[0] == "open":
			d.open(f[1])
			fmt.Println("opened")
		case len(f) > 1 && f[0] == "send":
			fmt.Println("reply " + strings.Join(d.send(f[1:]), " "))
		default:
			fmt.Fprintf(os.Stderr, "seed daemon: bad command %q\n", in.Text())
			os.Exit(2)
		}
	}
}

type seed struct {
	dir       string
	how       string
	req, resp *os.File
}

func (d *seed) open(how string) {
	d.how = how
	reqPath, respPath := filepath.Join(d.dir, "req.fifo"), filepath.Join(d.dir, "resp.fifo")
	var err error
	switch how {
	case "resp-first":
		d.resp, err = os.OpenFile(respPath, os.O_RDONLY, 0)
		if err == nil {
			d.req, err = os.OpenFile(reqPath, os.O_WRONLY, 0)
		}
	case "req-first":
		d.req, err = os.OpenFile(reqPath, os.O_WRONLY, 0)
		if err == nil {
			d.resp, err = os.OpenFile(respPath, os.O_RDONLY, 0)
		}
	case "retry-req":
		d.resp, err = os.OpenFile(respPath, os.O_RDONLY, 0)
		for err == nil {
			var fd int
			fd, err = syscall.Open(reqPath, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
			if err == nil {
				syscall.SetNonblock(fd, false)
				d.req = os.NewFile(uintptr(fd), reqPath)
				break
			}
			if errors.Is(err, syscall.ENXIO) {
				err = nil
				time.Sleep(10 * time.Millisecond)
			}
		}
	default:
		err = fmt.Errorf("open %q: no such way", how)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seed daemon:", err)
		os.Exit(1)
	}
}

func (d *seed) send(bodies []string) []string {
	var out []byte
	for _, b := range bodies {
		p, _ := (&wire.RelayRequest{Endpoint: "/v1/daemon/ack", Body: []byte(b)}).MarshalMsg(nil)
		out = frame.Append(out, p)
	}
	for {
		replies, err := d.exchange(out, len(bodies))
		if err == nil {
			return replies
		}
		// The relay died: reopen, as a daemon of the seed does, and retry.
		d.req.Close()
		d.resp.Close()
		d.open(d.how)
	}
}

func (d *seed) exchange(out []byte, n int) ([]string, error) {
	if _, err := d.req.Write(out); err != nil {
		return nil, err
	}
	var replies []string
	for range n {
		var hdr [4]byte
		if _, err := io.ReadFull(d.resp, hdr[:]); err != nil {
			return nil, err
		}
		p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(d.resp, p); err != nil {
			return nil, err
		}
		replies = append(replies, string(p))
	}
	return replies, nil
}

// seedProc is a running seed daemon.
type seedProc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startSeedDaemon(t *testing.T, dir string) *seedProc {
	t.Helper()
	cmd, in, out := startRole(t, seedDaemonEnv+"="+dir)
	t.Cleanup(func() { cmd.Process.Kill() })
	return &seedProc{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
}

// startRole runs this test binary in the role env names, with pipes to
// its stdin and from its stdout; when the test ends its stdin is closed
// (a role takes that as the end) and it is waited for.
func startRole(tb testing.TB, env string) (*exec.Cmd, io.WriteCloser, io.Reader) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	return cmd, in, out
}

// expect sends a command and fails the test unless the answer is want.
func (s *seedProc) expect(cmd, want string) {
	s.t.Helper()
	if got := s.do(cmd); got != want {
		s.t.Fatalf("seed daemon: %q answered %q, want %q", cmd, got, want)
	}
}

// do sends a command and returns the daemon's answer, failing the test if
// none comes within the deadline (a daemon blocked in open(2) forever).
func (s *seedProc) do(cmd string) string {
	s.t.Helper()
	got := make(chan string, 1)
	go func() {
		fmt.Fprintln(s.in, cmd)
		if s.out.Scan() {
			got <- s.out.Text()
		}
		close(got)
	}()
	select {
	case line, ok := <-got:
		if !ok {
			s.t.Fatalf("seed daemon: %q: no answer (exited)", cmd)
		}
		return line
	case <-time.After(deadline):
		s.t.Fatalf("seed daemon: %q: no answer within %v (blocked)", cmd, deadline)
		return ""
	}
}

// relayProc is a relay in a process of its own.
type relayProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startRelayProcess(t testing.TB, prefix, upstream string) *relayProc {
	return startRelayProcessWith(t, prefix, upstream, 0, os.Stderr)
}

// startRelayProcessWith starts the relay process with its open-file
// limit set to nofile (0: inherited) and its log going to logTo.
func startRelayProcessWith(t testing.TB, prefix, upstream string, nofile int, logTo io.Writer) *relayProc {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("relay-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if nofile > 0 {
		cmd = exec.Command("sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" -test.run='^$'`, nofile), os.Args[0])
	}
	cmd.Env = append(os.Environ(), relayProcessEnv+"="+prefix+"|"+upstream+"|"+tok)
	cmd.Stderr = logTo
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rp := &relayProc{cmd: cmd, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(rp.done)
	}()
	t.Cleanup(func() { rp.kill() })
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("relay process did not start")
		}
	case <-time.After(deadline):
		t.Fatal("relay process not ready")
	}
	return rp
}

func (rp *relayProc) kill() {
	rp.cmd.Process.Signal(syscall.SIGKILL)
	<-rp.done
}

// A seed daemon's blocking opens return at once in either order, raw
// frames are answered in step, one for one, pipelined or not.
func TestSeedDaemonBlockingOpens(t *testing.T) {
	for _, how := range []string{"resp-first", "req-first", "retry-req"} {
		t.Run(how, func(t *testing.T) {
			fp := newFakePlane(t)
			_, pair := relayOnOnePair(t, fp.URL, nil)
			d := startSeedDaemon(t, pair.dir)
			d.expect("open "+how, "opened")
			for i := range 3 {
				want := fmt.Sprintf("reply echo:a%d", i)
				d.expect(fmt.Sprintf("send a%d", i), want)
			}
			d.expect("send p1 p2 p3", "reply echo:p1 echo:p2 echo:p3")
		})
	}
}

// A seed daemon started before the relay: its blocking open of resp waits
// for the relay, its open of req is retried while ENXIO says no relay
// holds it, and the first reply it reads answers its first request.
func TestSeedDaemonBeforeTheRelay(t *testing.T) {
	fp := newFakePlane(t)
	prefix, dir := prefixWithPair(t)
	d := startSeedDaemon(t, dir)
	opened := make(chan string, 1)
	go func() { opened <- d.do("open retry-req") }()
	time.Sleep(200 * time.Millisecond) // the daemon is blocked in open(resp)
	startRelay(t, prefix, fp.URL, nil)
	if got := <-opened; got != "opened" {
		t.Fatalf("open: %q", got)
	}
	d.expect("send first", "reply echo:first")
}

// kill -9 of a relay process while the seed daemon is idle and while it
// waits for a reply: the daemon reopens, a new relay answers, and every
// reply it reads is the answer to the request it sent, however often the
// relay restarts (a relay that wrote a notice at start would shift them).
func TestSeedDaemonAcrossRelayKills(t *testing.T) {
	fp := newFakePlane(t)
	prefix, dir := prefixWithPair(t)
	rp := startRelayProcess(t, prefix, fp.URL)
	d := startSeedDaemon(t, dir)
	d.expect("open resp-first", "opened")
	d.expect("send before", "reply echo:before")
	for round := range 3 {
		// Idle: killed between two requests.
		rp.kill()
		rp = startRelayProcess(t, prefix, fp.URL)
		want := fmt.Sprintf("reply echo:idle%d", round)
		d.expect(fmt.Sprintf("send idle%d", round), want)
		// Waiting: killed with a poll parked upstream.
		fp.mu.Lock()
		fp.block = make(chan struct{})
		fp.mu.Unlock()
		answered := make(chan string, 1)
		go func() { answered <- d.do(fmt.Sprintf("send wait%d", round)) }()
		testkit.WaitUntil(t, deadline, "the request upstream", func() bool {
			rs := fp.requests()
			return len(rs) > 0 && rs[len(rs)-1].BodyLen == len(fmt.Sprintf("wait%d", round))
		})
		rp.kill()
		fp.mu.Lock()
		close(fp.block)
		fp.block = nil
		fp.mu.Unlock()
		rp = startRelayProcess(t, prefix, fp.URL)
		want = fmt.Sprintf("reply echo:wait%d", round)
		if got := <-answered; got != want {
			t.Fatalf("round %d after a kill while waiting: %q, want %q", round, got, want)
		}
	}
}

// A machine directory renamed into the prefix, and one removed and made
// again, are pumped; a seed daemon opening the new pipes gets replies in
// step from the first.
func TestSeedDaemonDirectoryRenamedInAndRecreated(t *testing.T) {
	fp := newFakePlane(t)
	prefix := t.TempDir()
	rl, _, _ := startRelay(t, prefix, fp.URL, nil)
	outside := filepath.Join(t.TempDir(), "m1")
	makePair(t, outside, "")
	dir := filepath.Join(prefix, "m1")
	if err := os.Rename(outside, dir); err != nil {
		t.Skip("rename across temp dirs:", err)
	}
	testkit.WaitUntil(t, deadline, "the renamed pair", func() bool { return rl.metrics.pumps.Load() == 1 })
	d := startSeedDaemon(t, dir)
	d.expect("open req-first", "opened")
	d.expect("send r1", "reply echo:r1")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, deadline, "the removed pair", func() bool { return rl.metrics.pumps.Load() == 0 })
	makePair(t, dir, "")
	testkit.WaitUntil(t, deadline, "the re-created pair", func() bool { return rl.metrics.pumps.Load() == 1 })
	d2 := startSeedDaemon(t, dir)
	d2.expect("open resp-first", "opened")
	d2.expect("send r2 r3", "reply echo:r2 echo:r3")
}

// Under a small open-file limit (ulimit -n 400: a budget of 44 pipes) the
// relay holds the request pipe of all 40 pairs and the reply pipe of as
// many as fit: a blocking open of resp returns at once on exactly those 4,
// the relay says once that the budget is spent and how to raise it, and
// /status-counted pairs without a held reply pipe still carry frames for a
// daemon that opens resp non-blocking, as ours does.
func TestFileLimitBudget(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh to lower the relay's open-file limit:", err)
	}
	const pairs, nofile = 40, 400
	budget := nofile - nofile/4 - reservedFDs // keptPipeBound under that limit
	fp := newFakePlane(t)
	prefix := t.TempDir()
	for i := range pairs {
		makePair(t, filepath.Join(prefix, fmt.Sprintf("m%02d", i)), "")
	}
	var log testkit.SyncBuffer
	startRelayProcessWith(t, prefix, fp.URL, nofile, &log)

	held := 0
	for i := range pairs {
		dir := filepath.Join(prefix, fmt.Sprintf("m%02d", i))
		opened := make(chan *os.File, 1)
		go func() {
			f, err := os.OpenFile(filepath.Join(dir, "resp.fifo"), os.O_RDONLY, 0) // blocking
			if err != nil {
				t.Error(err)
			}
			opened <- f
		}()
		select {
		case f := <-opened:
			held++
			f.Close()
		case <-time.After(200 * time.Millisecond):
			// Not held: release the blocked open with a writer of our own.
			w, err := os.OpenFile(filepath.Join(dir, "resp.fifo"), os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			(<-opened).Close()
			w.Close()
		}
		// Either way the pair carries a frame for a daemon that opens resp
		// non-blocking.
		d := daemonSide{dir: dir}
		id := fmt.Sprintf("f-%d", i)
		if rep := decodeReply(t, d.roundTrip(t, envelope(t, "/v1/daemon/ack", id, []byte("x")))); rep.ID != id || rep.Status != 200 {
			t.Fatalf("%s: reply %+v", dir, rep)
		}
	}
	if want := budget - pairs; held != want {
		t.Fatalf("%d reply pipes held, want %d (budget %d, %d pairs)", held, want, budget, pairs)
	}
	if n := strings.Count(log.String(), "open-file budget is spent"); n != 1 {
		t.Fatalf("the relay said %d times that the budget is spent, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "LimitNOFILE") {
		t.Fatalf("the warning does not say how to raise the limit:\n%s", log.String())
	}
}
