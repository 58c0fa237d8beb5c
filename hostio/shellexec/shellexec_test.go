//go:build unix

package shellexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/wire"
)

func testOptions() Options {
	return Options{KillGrace: 300 * time.Millisecond, DrainGrace: 300 * time.Millisecond}
}

func ptr[T any](v T) *T { return &v }

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		want int
	}{
		{"true", 0},
		{"exit 3", 3},
		{"exit 255", 255},
		{"false", 1},
		{"kill -KILL $$", -1}, // killed by a signal: no exit code
	} {
		res := Run(context.Background(), wire.Exec{ExecID: "e", Command: tc.cmd}, testOptions())
		if int(res.ExitCode) != tc.want {
			t.Errorf("%q: exit %d, want %d", tc.cmd, res.ExitCode, tc.want)
		}
		if res.Error != nil {
			t.Errorf("%q: error %q", tc.cmd, *res.Error)
		}
	}
}

func TestNotLoginShell(t *testing.T) {
	// bash -lc would set login_shell; bash -c must not.
	res := Run(context.Background(), wire.Exec{Command: "shopt -q login_shell && echo login || echo plain"}, testOptions())
	if res.Stdout != "plain\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func TestEnvMergedOnTopOfBase(t *testing.T) {
	opt := testOptions()
	opt.BaseEnv = []string{"PATH=" + os.Getenv("PATH"), "KEEP=base", "OVER=base"}
	ex := wire.Exec{Command: `echo "$KEEP $OVER $NEW"`, Env: map[string]string{"OVER": "exec", "NEW": "x y"}}
	res := Run(context.Background(), ex, opt)
	if res.Stdout != "base exec x y\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func TestDefaultBaseEnvIsDaemons(t *testing.T) {
	t.Setenv("NYMPH_SHELLEXEC_PROBE", "inherited")
	res := Run(context.Background(), wire.Exec{Command: `echo "$NYMPH_SHELLEXEC_PROBE"`}, testOptions())
	if res.Stdout != "inherited\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func TestStdin(t *testing.T) {
	res := Run(context.Background(), wire.Exec{Command: "cat; echo end", Stdin: "line1\nline2\n"}, testOptions())
	if res.Stdout != "line1\nline2\nend\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	// Absent stdin is an empty, closed pipe: cat ends at once.
	res = Run(context.Background(), wire.Exec{Command: "cat; echo end"}, testOptions())
	if res.Stdout != "end\n" {
		t.Fatalf("empty stdin: stdout %q", res.Stdout)
	}
	// A child that never reads a large stdin still finishes.
	big := strings.Repeat("x", 1<<20)
	res = Run(context.Background(), wire.Exec{Command: "echo skip", Stdin: big}, testOptions())
	if res.ExitCode != 0 || res.Stdout != "skip\n" {
		t.Fatalf("unread stdin: %+v", res)
	}
}

func TestWorkdir(t *testing.T) {
	def, own := t.TempDir(), t.TempDir()
	opt := testOptions()
	opt.DefaultWorkdir = def
	res := Run(context.Background(), wire.Exec{Command: "pwd -P"}, opt)
	if got := strings.TrimSpace(res.Stdout); got != realPath(t, def) {
		t.Errorf("default workdir: %q, want %q", got, def)
	}
	res = Run(context.Background(), wire.Exec{Command: "pwd -P", Workdir: &own}, opt)
	if got := strings.TrimSpace(res.Stdout); got != realPath(t, own) {
		t.Errorf("exec workdir: %q, want %q", got, own)
	}
}

func realPath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSpawnFailure(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	res := Run(context.Background(), wire.Exec{ExecID: "e1", Command: "true", Workdir: &missing}, testOptions())
	if res.ExitCode != wire.ExitSpawnFailed {
		t.Fatalf("exit %d, want -1", res.ExitCode)
	}
	if res.Error == nil || !strings.Contains(*res.Error, "e1") {
		t.Fatalf("error %v", res.Error)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestTimeoutKillsGroupWithGrandchild(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	// The grandchild is a separate process (not the shell) and detaches its
	// output, so only the group signal can reach it.
	cmd := fmt.Sprintf(`sleep 60 >/dev/null 2>&1 </dev/null & echo $! > %s; echo started; wait`, pidFile)
	start := time.Now()
	res := Run(context.Background(), wire.Exec{Command: cmd, TimeoutS: ptr(wire.Number(1))}, testOptions())
	if res.ExitCode != wire.ExitTimeout {
		t.Fatalf("exit %d, want -2", res.ExitCode)
	}
	if res.Stdout != "started\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v", el)
	}
	testkit.WaitExited(t, 10*time.Second, readPID(t, pidFile))
}

func TestTimeoutSigkillsChildIgnoringSigterm(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "stubborn")
	cmd := fmt.Sprintf(`bash -c 'trap "" TERM; echo $$ > %s; while :; do sleep 0.05; done' & wait`, pidFile)
	opt := testOptions()
	start := time.Now()
	// The timeout leaves the shell ample time to set its trap first, even
	// on a loaded machine.
	res := Run(context.Background(), wire.Exec{Command: cmd, TimeoutS: ptr(wire.Number(1))}, opt)
	if res.ExitCode != wire.ExitTimeout {
		t.Fatalf("exit %d, want -2", res.ExitCode)
	}
	// The stubborn child outlived SIGTERM, so the full grace ran.
	if el := time.Since(start); el < time.Second+opt.KillGrace/2 {
		t.Errorf("returned after %v: grace not honoured", el)
	}
	testkit.WaitExited(t, 10*time.Second, readPID(t, pidFile))
}

// The daemon leaves KillGrace at zero, so a timed-out exec gets the
// spec's 5 s between SIGTERM and SIGKILL. A shell whose SIGTERM handler
// needs 1.5 s to clean up must be let finish it: its last words reach
// stdout and the stop ends as soon as the group is gone, well before the
// grace would have run out.
func TestDefaultKillGraceLetsSigtermHandlerFinish(t *testing.T) {
	const cleanup = 1500 * time.Millisecond
	cmd := fmt.Sprintf(`trap 'sleep %.1f; echo cleaned up; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, cleanup.Seconds())
	timeout := time.Second // ample time to set the trap, even on a loaded machine
	start := time.Now()
	res := Run(context.Background(), wire.Exec{Command: cmd, TimeoutS: ptr(wire.Number(timeout.Seconds()))}, Options{})
	el := time.Since(start)
	if res.ExitCode != wire.ExitTimeout {
		t.Fatalf("exit %d, want -2", res.ExitCode)
	}
	switch res.Stdout {
	case "ready\ncleaned up\n":
	case "ready\n":
		t.Fatalf("SIGTERM handler cut short after %v: the default grace is under %v", el, cleanup)
	default:
		t.Fatalf("stdout %q: the shell did not set its trap before the timeout", res.Stdout)
	}
	if el < timeout+cleanup {
		t.Errorf("returned after %v, before the handler could finish", el)
	}
	if el >= timeout+DefaultKillGrace {
		t.Errorf("returned after %v: the stop waited out the grace of a group already gone", el)
	}
}

func TestContextCancelKills(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan wire.ExecResult, 1)
	go func() {
		done <- Run(ctx, wire.Exec{Command: "echo $$ > " + ready + "; exec sleep 60"}, testOptions())
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(bytes.TrimSpace(b)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("exec never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	pid := readPID(t, ready)
	cancel()
	res := <-done
	if res.ExitCode != wire.ExitSpawnFailed {
		t.Fatalf("exit %d, want -1", res.ExitCode)
	}
	testkit.WaitExited(t, 10*time.Second, pid)
}

// The messages are the protocol's own text (docs/protocol.md, "Exec
// result"), spelled out rather than taken from wire's constants so that a
// change to those constants fails here as well.
func TestTruncation(t *testing.T) {
	over := MaxCapture + 5000
	for _, tc := range []struct {
		name, cmd, wantErr string
		outLen, errLen     int
	}{
		{"stdout", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", over), "stdout truncated", MaxCapture, 0},
		{"stderr", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' b >&2", over), "stderr truncated", 0, MaxCapture},
		{"both", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a; head -c %d /dev/zero | tr '\\0' b >&2", over, over), "stdout truncated; stderr truncated", MaxCapture, MaxCapture},
		{"exact", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", MaxCapture), "", MaxCapture, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Run(context.Background(), wire.Exec{Command: tc.cmd}, testOptions())
			if res.ExitCode != 0 {
				t.Fatalf("exit %d", res.ExitCode)
			}
			if len(res.Stdout) != tc.outLen || len(res.Stderr) != tc.errLen {
				t.Fatalf("lengths %d/%d, want %d/%d", len(res.Stdout), len(res.Stderr), tc.outLen, tc.errLen)
			}
			if strings.Trim(res.Stdout, "a") != "" || strings.Trim(res.Stderr, "b") != "" {
				t.Fatal("wrong bytes kept")
			}
			got := ""
			if res.Error != nil {
				got = *res.Error
			}
			if got != tc.wantErr {
				t.Fatalf("error %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func TestInvalidUTF8IsReplaced(t *testing.T) {
	res := Run(context.Background(), wire.Exec{Command: `printf 'ok\xff\xfe-\xe2\x82-\xe2\x82\xac'`}, testOptions())
	want := "ok\uFFFD\uFFFD-\uFFFD-€"
	if res.Stdout != want {
		t.Fatalf("stdout %q, want %q", res.Stdout, want)
	}
}

func TestTruncationCutsBytesThenConverts(t *testing.T) {
	// 1 MiB - 1 bytes of 'a', then a 3-byte '€': the cut leaves its first
	// byte, which becomes one U+FFFD.
	cmd := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a; printf '\xe2\x82\xac'`, MaxCapture-1)
	res := Run(context.Background(), wire.Exec{Command: cmd}, testOptions())
	if !strings.HasSuffix(res.Stdout, "a\uFFFD") || len(res.Stdout) != MaxCapture-1+3 {
		t.Fatalf("len %d suffix %q", len(res.Stdout), res.Stdout[len(res.Stdout)-8:])
	}
	if res.Error == nil || *res.Error != "stdout truncated" {
		t.Fatalf("error %v", res.Error)
	}
}

func TestLossyStringMatchesRust(t *testing.T) {
	// Expected values are what Rust's String::from_utf8_lossy returns.
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"héllo", "héllo"},
		{"\xff", "\uFFFD"},
		{"\xff\xff", "\uFFFD\uFFFD"},
		{"\xe2\x82", "\uFFFD"},
		{"\xe2\x82A", "\uFFFDA"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\x80", "😀"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: bad second byte
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"}, // overlong
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{"\xf1\x80\x80", "\uFFFD"},
		{"a\xf1\x80\x80b", "a\uFFFDb"},
		{"\uFFFD", "\uFFFD"},
	} {
		if got := lossyString([]byte(tc.in)); got != tc.want {
			t.Errorf("lossy(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// flakyPoster fails every failEvery-th post and records the rest.
type flakyPoster struct {
	mu        sync.Mutex
	calls     int
	failEvery int
	got       []byte
	urls      map[string]int
}

func (p *flakyPoster) PostChunk(_ context.Context, url string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.failEvery > 0 && p.calls%p.failEvery == 0 {
		return errors.New("injected failure")
	}
	if p.urls == nil {
		p.urls = map[string]int{}
	}
	p.urls[url]++
	p.got = append(p.got, data...)
	return nil
}

func TestStreamingDeliversEverythingInOrder(t *testing.T) {
	p := &flakyPoster{failEvery: 2}
	opt := testOptions()
	opt.Poster = p
	// Numbered lines, alternating streams, with pauses so several flushes
	// happen on the timer as well as on size.
	cmd := `for i in $(seq 1 400); do if [ $((i%2)) = 0 ]; then echo "line $i" >&2; else echo "line $i"; fi; if [ $((i%100)) = 0 ]; then sleep 0.05; fi; done`
	ex := wire.Exec{Command: cmd, Log: &wire.LogSink{StdoutURL: "http://127.0.0.1/chunk", FlushBytes: 512, FlushMS: 20}}
	res := Run(context.Background(), ex, opt)
	if res.ExitCode != 0 || res.Stdout != "" || res.Stderr != "" || res.Error != nil {
		t.Fatalf("result %+v", res)
	}
	lines := strings.Split(strings.TrimSuffix(string(p.got), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines delivered, want 400", len(lines))
	}
	// Each stream keeps its own order; the two interleave as produced.
	last := map[int]int{}
	for _, l := range lines {
		n, err := strconv.Atoi(strings.TrimPrefix(l, "line "))
		if err != nil {
			t.Fatalf("bad line %q", l)
		}
		if n <= last[n%2] {
			t.Fatalf("line %d after %d", n, last[n%2])
		}
		last[n%2] = n
	}
	if p.calls < 4 || p.urls["http://127.0.0.1/chunk"] < 2 {
		t.Fatalf("only %d posts", p.calls)
	}
}

func TestStreamingFinalFlushRetries(t *testing.T) {
	// The only chunk fails once; the final flush retries it.
	p := &flakyPoster{failEvery: 1}
	opt := testOptions()
	opt.Poster = &failFirst{inner: p}
	ex := wire.Exec{Command: "echo hello", Log: &wire.LogSink{StdoutURL: "u", FlushBytes: 1 << 20, FlushMS: 10_000}}
	res := Run(context.Background(), ex, opt)
	p.failEvery = 0
	if res.ExitCode != 0 {
		t.Fatalf("exit %d", res.ExitCode)
	}
	if string(p.got) != "hello\n" {
		t.Fatalf("delivered %q", p.got)
	}
}

type failFirst struct {
	once  sync.Once
	inner *flakyPoster
}

func (f *failFirst) PostChunk(ctx context.Context, url string, data []byte) error {
	failed := false
	f.once.Do(func() { failed = true })
	if failed {
		return errors.New("first post fails")
	}
	f.inner.mu.Lock()
	f.inner.got = append(f.inner.got, data...)
	f.inner.mu.Unlock()
	return nil
}

func TestStreamingTimeout(t *testing.T) {
	p := &flakyPoster{}
	opt := testOptions()
	opt.Poster = p
	ex := wire.Exec{Command: "echo before; sleep 60", TimeoutS: ptr(wire.Number(1)), Log: &wire.LogSink{StdoutURL: "u"}}
	res := Run(context.Background(), ex, opt)
	if res.ExitCode != wire.ExitTimeout {
		t.Fatalf("exit %d", res.ExitCode)
	}
	if string(p.got) != "before\n" {
		t.Fatalf("delivered %q", p.got)
	}
}

// A sink whose posts all fail fills the shipper's buffer, and the child
// then waits on its writes (back-pressure); a timeout or a cancel still
// ends the exec, dropping what the stopped group writes, rather than
// waiting on a buffer that never empties.
func TestStreamingStopsWhenItsSinkKeepsFailing(t *testing.T) {
	for _, how := range []string{"timeout", "cancel"} {
		t.Run(how, func(t *testing.T) {
			opt := testOptions()
			opt.Poster = &flakyPoster{failEvery: 1}
			opt.MaxBuffered = 1 << 20
			ex := wire.Exec{Command: "head -c 8388608 /dev/zero; sleep 60",
				Log: &wire.LogSink{StdoutURL: "u", FlushBytes: 64 << 10, FlushMS: 50}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			want := wire.ExitSpawnFailed
			if how == "timeout" {
				ex.TimeoutS, want = ptr(wire.Number(1)), wire.ExitTimeout
			} else {
				time.AfterFunc(time.Second, cancel)
			}
			done := make(chan wire.ExecResult, 1)
			go func() { done <- Run(ctx, ex, opt) }()
			select {
			case res := <-done:
				if res.ExitCode != wire.Int(want) {
					t.Fatalf("exit %d, want %d", res.ExitCode, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the exec did not end within 30 s of a 1 s %s", how)
			}
		})
	}
}

func TestDurationMeasured(t *testing.T) {
	res := Run(context.Background(), wire.Exec{Command: "sleep 0.1"}, testOptions())
	if res.DurationMS < 100 || res.DurationMS > 5000 {
		t.Fatalf("duration %d ms", res.DurationMS)
	}
}

func TestBackgroundHolderDoesNotHang(t *testing.T) {
	// A background job keeps stdout open after the shell exits; the exec
	// ends after the drain grace with what was written so far.
	pidFile := filepath.Join(t.TempDir(), "holder")
	start := time.Now()
	res := Run(context.Background(), wire.Exec{Command: "echo hi; sleep 30 & echo $! > " + pidFile}, testOptions())
	if pid := readPID(t, pidFile); pid > 0 {
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	if res.ExitCode != 0 || res.Stdout != "hi\n" {
		t.Fatalf("result %+v", res)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v", el)
	}
}

// shutdownPoster refuses posts while the exec runs (so bytes stay
// buffered) and, once posts carry a shutdown deadline, blocks until it.
type shutdownPoster struct {
	mu        sync.Mutex
	calls     int
	bounded   int
	firstCall chan struct{}
}

func (p *shutdownPoster) PostChunk(ctx context.Context, _ string, _ []byte) error {
	p.mu.Lock()
	p.calls++
	if p.calls == 1 {
		close(p.firstCall)
	}
	_, bounded := ctx.Deadline()
	if bounded {
		p.bounded++
	}
	p.mu.Unlock()
	if !bounded {
		return errors.New("control plane unreachable")
	}
	<-ctx.Done()
	return ctx.Err()
}

func TestStreamingPostsAfterCancelAreBounded(t *testing.T) {
	p := &shutdownPoster{firstCall: make(chan struct{})}
	opt := testOptions()
	opt.Poster = p
	opt.ShutdownPostGrace = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-p.firstCall; cancel() }()
	res := Run(ctx, wire.Exec{Command: "echo out; exec sleep 60", Log: &wire.LogSink{StdoutURL: "u", FlushMS: 10}}, opt)
	if res.ExitCode != wire.ExitSpawnFailed {
		t.Fatalf("exit %d", res.ExitCode)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The buffered bytes were still offered after the cancel, with a
	// deadline, and the final flush gave up after its attempts (a timer
	// flush during the kill may add one or two more).
	if p.bounded < finalFlushAttempts || p.bounded > finalFlushAttempts+3 {
		t.Fatalf("%d bounded posts, want about %d (of %d)", p.bounded, finalFlushAttempts, p.calls)
	}
}

// sizedPoster refuses posts over limit bytes, as a plane refuses a chunk
// over its limit (413), and records the rest.
type sizedPoster struct {
	mu      sync.Mutex
	limit   int
	failFor time.Time // every post fails before this (an outage)
	got     int
	largest int
}

func (p *sizedPoster) PostChunk(_ context.Context, _ string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.failFor) {
		return errors.New("plane down")
	}
	if len(data) > p.limit {
		return fmt.Errorf("413: %d bytes", len(data))
	}
	p.got += len(data)
	p.largest = max(p.largest, len(data))
	return nil
}

// Output that piled up past one chunk's limit while the plane was down
// goes out in chunks the plane takes once it is back, and the exec ends.
func TestStreamingBacklogGoesOutInChunksAPlaneTakes(t *testing.T) {
	p := &sizedPoster{limit: wire.MaxChunkBodyBytes, failFor: time.Now().Add(1500 * time.Millisecond)}
	opt := testOptions()
	opt.Poster = p
	opt.MaxBuffered = 2 * wire.MaxChunkBodyBytes
	const n = 20 << 20
	ex := wire.Exec{Command: fmt.Sprintf("head -c %d /dev/zero", n), TimeoutS: ptr(wire.Number(60)),
		Log: &wire.LogSink{StdoutURL: "u", FlushBytes: 64 << 10, FlushMS: 50}}
	res := Run(context.Background(), ex, opt)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d (%+v)", res.ExitCode, res)
	}
	if p.got != n || p.largest > wire.MaxChunkBodyBytes {
		t.Fatalf("delivered %d of %d bytes, largest chunk %d", p.got, n, p.largest)
	}
}
