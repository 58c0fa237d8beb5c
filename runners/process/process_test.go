//go:build unix

package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/internal/testbuild"
	"github.com/nymphd/nymph/wirecore/wire"
)

var entryPath string

func TestMain(m *testing.M) { testbuild.Main(m, "nymph-process-entry-", &entryPath) }

func ptr[T any](v T) *T { return &v }

func TestArgv(t *testing.T) {
	entry := []string{"python3", "-m", "dreamlake.lakeshore.daemon.entry"}
	for _, tc := range []struct {
		name string
		run  wire.Run
		want []string
	}{
		{"entry", wire.Run{}, entry},
		{"script", wire.Run{Script: ptr("apt-get install -y x")}, []string{"bash", "-c", "apt-get install -y x"}},
		{"as_user", wire.Run{AsUser: ptr("alice")}, []string{"runuser", "-u", "alice", "--", "python3", "-m", "dreamlake.lakeshore.daemon.entry"}},
		{"sudo script", wire.Run{AsUser: ptr("root"), Script: ptr("id")}, []string{"runuser", "-u", "root", "--", "bash", "-c", "id"}},
		// A hostile name stays one argv element; nothing is parsed by a shell.
		{"odd user", wire.Run{AsUser: ptr("x; rm -rf /")}, []string{"runuser", "-u", "x; rm -rf /", "--", "python3", "-m", "dreamlake.lakeshore.daemon.entry"}},
	} {
		if diff := cmp.Diff(tc.want, Argv(tc.run, entry)); diff != "" {
			t.Errorf("%s: %s", tc.name, diff)
		}
	}
}

type fixture struct {
	root string
	reg  *runners.Registry
	logs *testkit.SyncBuffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{root: filepath.Join(t.TempDir(), "udf"), logs: &testkit.SyncBuffer{}}
	log := slog.New(slog.NewTextHandler(f.logs, nil))
	rn := New(Options{KillGrace: 300 * time.Millisecond, DrainGrace: 300 * time.Millisecond})
	f.reg = runners.NewRegistry(runners.Config{Root: f.root, Entry: []string{entryPath}, Log: log}, rn)
	return f
}

func (f *fixture) run(ctx context.Context, id, args string, mod func(*wire.Run)) runners.Outcome {
	r := wire.Run{InvocationID: id, ArgsBlob: []byte(args)}
	if mod != nil {
		mod(&r)
	}
	return f.reg.ExecuteAs(ctx, runners.KindProcess, r, "")
}

func (f *fixture) exists(name string) bool {
	_, err := os.Stat(filepath.Join(f.root, name))
	return err == nil
}

func TestSuccessReturnsResultAndDeletesWorkdir(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "inv-ok", "ok:the result", nil)
	if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded, ResultBlob: []byte("the result")}, o); diff != "" {
		t.Fatal(diff)
	}
	if f.exists("inv-ok") {
		t.Fatal("workdir kept after success")
	}
}

func TestSubprocessAlias(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "inv-alias", "ok:x", func(r *wire.Run) { r.RunConfig.Runner = "subprocess" })
	if o.State != wire.StateSucceeded {
		t.Fatalf("%+v", o)
	}
}

func TestFailureSurfacesErrorJSONAndKeepsWorkdir(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "inv-fail", "fail:x must be positive", nil)
	want := runners.Outcome{State: wire.StateFailed, Error: &wire.ErrorInfo{
		TypeName: "ValueError", Message: "ValueError: x must be positive", Traceback: ptr("Traceback: testentry")}}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Fatal(diff)
	}
	if !f.exists("inv-fail/error.json") || !f.exists("inv-fail/args.msgpack") {
		t.Fatal("workdir of a failure not kept")
	}
}

func TestExitZeroWithoutResult(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "inv-empty", "exit0", nil)
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon || !strings.Contains(o.Error.Message, "without writing result.msgpack") {
		t.Fatalf("%+v", o.Error)
	}
}

func TestCrashWithoutErrorJSON(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "inv-crash", "exit:7", nil)
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon || o.Error.Message != "entry program failed: exit status 7" {
		t.Fatalf("%+v", o.Error)
	}
}

func TestEnvAndCwd(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "inv-env", "env", func(r *wire.Run) {
		r.ParentInvocationID, r.RootInvocationID = ptr("parent-1"), ptr("root-1")
	})
	dir := filepath.Join(f.root, "inv-env")
	want := strings.Join([]string{
		"DREAMLAKE_INVOCATION_ID=inv-env",
		"DREAMLAKE_PARENT_INVOCATION_ID=parent-1",
		"DREAMLAKE_ROOT_INVOCATION_ID=root-1",
		"DREAMLAKE_WORKDIR=" + dir,
		"cwd=" + dir,
		"uid=" + strconv.Itoa(os.Getuid()),
	}, "\n")
	if diff := cmp.Diff(want, string(o.ResultBlob)); diff != "" {
		t.Fatal(diff)
	}
}

func TestOutputGoesToLogLineByLine(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "inv-print", "print:hello from the child", nil)
	if o.State != wire.StateSucceeded {
		t.Fatalf("%+v", o)
	}
	logs := f.logs.String()
	for _, stream := range []string{"stdout", "stderr"} {
		want := fmt.Sprintf(`msg="child output" invocation_id=inv-print runner=process stream=%s line="hello from the child"`, stream)
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s line %q:\n%s", stream, want, logs)
		}
	}
}

// The child's stdout and stderr reach the run's Tail while it runs, a
// partial line too, not only once it ended.
func TestOutputReachesTheTailWhileTheChildRuns(t *testing.T) {
	f := newFixture(t)
	tail := runners.NewTail()
	script := `echo first; echo warning >&2; printf 'working…'; while [ ! -e go ]; do sleep 0.02; done; echo; echo second`
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- f.reg.Execute(context.Background(), runners.Execution{Kind: runners.KindProcess,
			Run: wire.Run{InvocationID: "inv-tail", Script: &script}, Tail: tail})
	}()
	testkit.WaitUntil(t, 10*time.Second, "the running child's output in the tail", func() bool {
		// The two streams interleave as they are read: the order
		// between them is not fixed.
		s := tail.String()
		return strings.Contains(s, "first\n") && strings.Contains(s, "warning\n") && strings.Contains(s, "working…")
	})
	select {
	case o := <-done:
		t.Fatalf("the child ended before it was told to: %+v", o)
	default:
	}
	if err := os.WriteFile(filepath.Join(f.root, "inv-tail", "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if o := <-done; o.State != wire.StateSucceeded {
		t.Fatalf("%+v", o)
	}
	if s := tail.String(); !strings.HasSuffix(s, "\nsecond\n") || strings.Count(s, "working…") != 1 {
		t.Fatalf("tail at the end: %q", s)
	}
}

func TestScript(t *testing.T) {
	f := newFixture(t)
	o := f.run(context.Background(), "setup-1", "", func(r *wire.Run) { r.Script = ptr("echo setting up; test -d .") })
	if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded}, o); diff != "" {
		t.Fatal(diff)
	}
	o = f.run(context.Background(), "setup-2", "", func(r *wire.Run) { r.Script = ptr("echo partial > out.txt; exit 3") })
	if diff := cmp.Diff(runners.ScriptExited(3), o); diff != "" {
		t.Fatal(diff)
	}
	if !f.exists("setup-2/out.txt") {
		t.Fatal("failed script's workdir not kept")
	}
}

func TestSpawnFailure(t *testing.T) {
	f := newFixture(t)
	rn := New(Options{})
	reg := runners.NewRegistry(runners.Config{Root: f.root, Entry: []string{filepath.Join(f.root, "no-such-entry")}}, rn)
	o := reg.ExecuteAs(context.Background(), runners.KindProcess, wire.Run{InvocationID: "inv-nospawn"}, "")
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon || !strings.Contains(o.Error.Message, "spawn") {
		t.Fatalf("%+v", o)
	}
}

func testCancel(t *testing.T, args string) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() { done <- f.run(ctx, "inv-cancel", args, nil) }()
	pid, err := strconv.Atoi(string(testkit.WaitContent(t, 20*time.Second, filepath.Join(f.root, "inv-cancel", "started"))))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	o := <-done
	if diff := cmp.Diff(runners.Killed(), o); diff != "" {
		t.Fatal(diff)
	}
	if o.Error.TypeName != wire.ErrTypeCancelled || o.Error.Message != wire.CancelledMessage {
		t.Fatalf("%+v", o.Error)
	}
	testkit.WaitExited(t, 10*time.Second, pid)
	if !f.exists("inv-cancel") {
		t.Fatal("workdir of a killed run not kept")
	}
}

func TestCancelStopsChild(t *testing.T)             { testCancel(t, "sleep:60") }
func TestCancelKillsChildIgnoringTerm(t *testing.T) { testCancel(t, "stubborn") }

func TestAsUser(t *testing.T) {
	const name = "nymphtest"
	if os.Geteuid() != 0 {
		t.Skip("as_user needs root to switch users")
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Skipf("user %s does not exist (CI creates it): %v", name, err)
	}
	// The root must be traversable by the second user: a t.TempDir parent
	// is 0700, so use a directory of our own.
	base, err := os.MkdirTemp("", "nymph-asuser-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "udf")
	// runuser answers SIGTERM only after its own 2 s wait; a short grace
	// keeps the test fast (the child itself is already gone by then).
	reg := runners.NewRegistry(runners.Config{Root: root, Entry: []string{entryPath}}, New(Options{KillGrace: 500 * time.Millisecond}))
	o := reg.ExecuteAs(context.Background(), runners.KindProcess, wire.Run{InvocationID: "inv-user", ArgsBlob: []byte("env"), AsUser: ptr(name)}, "")
	if o.State != wire.StateSucceeded {
		t.Fatalf("%+v", o.Error)
	}
	if !strings.Contains(string(o.ResultBlob), "\nuid="+u.Uid) {
		t.Fatalf("child did not run as %s (uid %s):\n%s", name, u.Uid, o.ResultBlob)
	}
	// A failing run stays on disk, owned by the user that wrote it.
	o = reg.ExecuteAs(context.Background(), runners.KindProcess, wire.Run{InvocationID: "inv-user-fail", ArgsBlob: []byte("fail:no"), AsUser: ptr(name)}, "")
	if o.State != wire.StateFailed || o.Error.Message != "ValueError: no" {
		t.Fatalf("%+v", o)
	}
	st, err := os.Stat(filepath.Join(root, "inv-user-fail", "error.json"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; strconv.Itoa(int(uid)) != u.Uid {
		t.Fatalf("error.json owned by uid %d", uid)
	}
	// Cancel reaches the child behind runuser.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- reg.ExecuteAs(ctx, runners.KindProcess, wire.Run{InvocationID: "inv-user-cancel", ArgsBlob: []byte("sleep:60"), AsUser: ptr(name)}, "")
	}()
	pid, err := strconv.Atoi(string(testkit.WaitContent(t, 20*time.Second, filepath.Join(root, "inv-user-cancel", "started"))))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if o := <-done; o.State != wire.StateKilled {
		t.Fatalf("%+v", o)
	}
	testkit.WaitExited(t, 10*time.Second, pid)
	// A setup with sudo runs as root.
	o = reg.ExecuteAs(context.Background(), runners.KindProcess, wire.Run{InvocationID: "setup-9", Script: ptr(`test "$(id -u)" = 0`), AsUser: ptr("root")}, "_setup-9")
	if o.State != wire.StateSucceeded {
		t.Fatalf("sudo setup: %+v", o)
	}
}

func TestPIDFileWhileTheChildRuns(t *testing.T) {
	pids, err := childpids.Open(filepath.Join(t.TempDir(), "pids"))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "udf")
	rn := New(Options{KillGrace: 300 * time.Millisecond, DrainGrace: 300 * time.Millisecond, PIDs: pids})
	reg := runners.NewRegistry(runners.Config{Root: root, Entry: []string{entryPath}}, rn)
	// The file is written once the child started: the script waits for
	// it (up to 5 s). Exit 3 keeps the workdir and the listing in it.
	script := `for i in $(seq 500); do ls '` + pids.Path() + `' > listing; test -s listing && break; sleep 0.01; done
echo $$ > pid; exit 3`
	o := reg.ExecuteAs(context.Background(), runners.KindProcess, wire.Run{InvocationID: "setup-pids", Script: &script}, "")
	if diff := cmp.Diff(runners.ScriptExited(3), o); diff != "" {
		t.Fatal(diff)
	}
	listing, err := os.ReadFile(filepath.Join(root, "setup-pids", "listing"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := os.ReadFile(filepath.Join(root, "setup-pids", "pid"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(listing), strings.TrimSpace(string(pid))+"-") || strings.Count(string(listing), ".json") != 1 {
		t.Errorf("PID files while the script ran: %q; want one, of pid %s", listing, pid)
	}
	if left, err := os.ReadDir(pids.Path()); err != nil || len(left) != 0 {
		t.Errorf("PID files after the run: %v, %v; want none", left, err)
	}
}
