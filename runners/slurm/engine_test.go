package slurm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// requireSlurm skips unless a SLURM controller answers here (CI starts a
// single-node cluster with .ci/engines.sh).
func requireSlurm(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("sinfo"); err != nil {
		t.Skip("no SLURM here: sinfo is not on PATH (.ci/engines.sh installs and starts one)")
	}
	out, err := exec.Command("sinfo", "-h", "-o", "%t").Output()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		t.Skipf("no SLURM controller answers: sinfo: %v %q", err, out)
	}
}

func realRun(ctx context.Context, root, id, args string) runners.Outcome {
	reg := runners.NewRegistry(runners.Config{Root: root, Entry: []string{entryPath}}, New(Options{}))
	return reg.ExecuteAs(ctx, runners.KindSlurm, wire.Run{InvocationID: id, ArgsBlob: []byte(args), ParentInvocationID: ptr("parent-s"),
		RunConfig: wire.RunConfig{Slurm: &wire.SlurmConfig{Time: "00:05:00", PollIntervalS: ptr(wire.Number(0.2))}}}, "")
}

func TestRealSlurm(t *testing.T) {
	requireSlurm(t)
	root := t.TempDir()
	t.Run("success", func(t *testing.T) {
		o := realRun(context.Background(), root, "s-ok", "ok:computed on slurm")
		if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded, ResultBlob: []byte("computed on slurm")}, o); diff != "" {
			t.Fatal(diff)
		}
		if _, err := os.Stat(filepath.Join(root, "s-ok")); !os.IsNotExist(err) {
			t.Fatal("workdir of a success kept")
		}
	})
	t.Run("env", func(t *testing.T) {
		o := realRun(context.Background(), root, "s-env", "env")
		dir := filepath.Join(root, "s-env")
		for _, want := range []string{"DREAMLAKE_INVOCATION_ID=s-env", "DREAMLAKE_PARENT_INVOCATION_ID=parent-s", "DREAMLAKE_WORKDIR=" + dir, "cwd=" + dir} {
			if !strings.Contains(string(o.ResultBlob), want+"\n") {
				t.Errorf("result lacks %q:\n%s", want, o.ResultBlob)
			}
		}
	})
	t.Run("failure", func(t *testing.T) {
		o := realRun(context.Background(), root, "s-fail", "fail:no convergence")
		if o.State != wire.StateFailed || o.Error.TypeName != "ValueError" || o.Error.Message != "ValueError: no convergence" {
			t.Fatalf("%+v %+v", o, o.Error)
		}
		for _, f := range []string{ScriptFile, "error.json", OutputFile} {
			if _, err := os.Stat(filepath.Join(root, "s-fail", f)); err != nil {
				t.Errorf("failed workdir lacks %s: %v", f, err)
			}
		}
	})
	t.Run("crash", func(t *testing.T) {
		o := realRun(context.Background(), root, "s-crash", "exit:4")
		if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon || !strings.Contains(o.Error.Message, "FAILED") {
			t.Fatalf("%+v %+v", o, o.Error)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan runners.Outcome, 1)
		go func() { done <- realRun(ctx, root, "s-cancel", "sleep:120") }()
		testkit.WaitFile(t, 60*time.Second, filepath.Join(root, "s-cancel", "started"))
		b, _ := os.ReadFile(filepath.Join(root, "s-cancel", "started"))
		pid, _ := strconv.Atoi(string(b))
		cancel()
		if diff := cmp.Diff(runners.Killed(), <-done); diff != "" {
			t.Fatal(diff)
		}
		// scancel ends the job: its process goes away.
		deadline := time.Now().Add(60 * time.Second)
		for pid > 0 {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job process %d still running after scancel", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// BenchmarkRealSlurmToEntry measures a run from Execute to the entry
// program's first instruction (ms-to-entry) and to the outcome (ns/op).
func BenchmarkRealSlurmToEntry(b *testing.B) {
	requireSlurm(b)
	root := b.TempDir()
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		o := realRun(context.Background(), root, "bench-"+strconv.Itoa(i), "stamp")
		ns, err := strconv.ParseInt(string(o.ResultBlob), 10, 64)
		if o.State != wire.StateSucceeded || err != nil {
			b.Fatalf("%+v %v", o, err)
		}
		total += time.Unix(0, ns).Sub(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-entry")
}
