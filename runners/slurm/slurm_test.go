package slurm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/internal/testbuild"
	"github.com/nymphd/nymph/wirecore/wire"
)

var entryPath string

func TestMain(m *testing.M) { testbuild.Main(m, "nymph-slurm-entry-", &entryPath) }

func ptr[T any](v T) *T { return &v }

func TestScript(t *testing.T) {
	inv := runners.Invocation{
		Run:     wire.Run{InvocationID: "inv7"},
		Workdir: "/var/lib/udf/inv7",
		Entry:   []string{"python3", "-m", "dreamlake.lakeshore.daemon.entry"},
	}
	want := `#!/bin/bash
#SBATCH --job-name=nymph-inv7
#SBATCH --chdir=/var/lib/udf/inv7
#SBATCH --output=/var/lib/udf/inv7/slurm.out
#SBATCH --time=01:00:00
export DREAMLAKE_INVOCATION_ID='inv7'
export DREAMLAKE_WORKDIR='/var/lib/udf/inv7'
cd '/var/lib/udf/inv7' || exit 1
exec 'python3' '-m' 'dreamlake.lakeshore.daemon.entry'
`
	got, err := Script(inv)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}

	inv.Run.ParentInvocationID, inv.Run.RootInvocationID = ptr("p"), ptr("r")
	inv.Entry = []string{"/opt/entry", "it's"}
	inv.Run.RunConfig.Slurm = &wire.SlurmConfig{Partition: "gpu", Time: "00:10:00", Gres: "gpu:a100:2", Nodes: "1",
		NtasksPerNode: "4", CPUsPerTask: "8", Mem: "16G", PollIntervalS: ptr(wire.Number(2))}
	want = `#!/bin/bash
#SBATCH --job-name=nymph-inv7
#SBATCH --chdir=/var/lib/udf/inv7
#SBATCH --output=/var/lib/udf/inv7/slurm.out
#SBATCH --partition=gpu
#SBATCH --time=00:10:00
#SBATCH --gres=gpu:a100:2
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --mem=16G
export DREAMLAKE_INVOCATION_ID='inv7'
export DREAMLAKE_WORKDIR='/var/lib/udf/inv7'
export DREAMLAKE_PARENT_INVOCATION_ID='p'
export DREAMLAKE_ROOT_INVOCATION_ID='r'
cd '/var/lib/udf/inv7' || exit 1
exec '/opt/entry' 'it'\''s'
`
	if got, err = Script(inv); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
}

func TestScriptOfAScriptRun(t *testing.T) {
	inv := runners.Invocation{
		Run:     wire.Run{InvocationID: "inv8", Script: ptr("srun hostname; echo 'done'")},
		Workdir: "/var/lib/udf/inv8",
		Entry:   []string{"python3", "-m", "dreamlake.lakeshore.daemon.entry"},
	}
	want := `#!/bin/bash
#SBATCH --job-name=nymph-inv8
#SBATCH --chdir=/var/lib/udf/inv8
#SBATCH --output=/var/lib/udf/inv8/slurm.out
#SBATCH --time=01:00:00
export DREAMLAKE_INVOCATION_ID='inv8'
export DREAMLAKE_WORKDIR='/var/lib/udf/inv8'
cd '/var/lib/udf/inv8' || exit 1
'bash' '-c' 'srun hostname; echo '\''done'\'''
status=$?
echo "$status" > '/var/lib/udf/inv8/script.status'
exit "$status"
`
	got, err := Script(inv)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
}

func TestScriptRunWithFakeSlurm(t *testing.T) {
	for _, mode := range []string{"all", "forget"} {
		t.Run(mode, func(t *testing.T) {
			opt, _ := fakeSlurm(t, mode)
			root := t.TempDir()
			reg := runners.NewRegistry(runners.Config{Root: root, Entry: []string{entryPath}}, New(opt))
			run := func(script string) runners.Outcome {
				return reg.ExecuteAs(context.Background(), runners.KindSlurm, wire.Run{InvocationID: "job2", Script: ptr(script),
					RunConfig: wire.RunConfig{Slurm: &wire.SlurmConfig{PollIntervalS: ptr(wire.Number(0.05))}}}, "")
			}
			// A job that ends before its script (here: the job's shell is
			// killed) has no status; a stale one of an earlier attempt
			// must not decide.
			os.MkdirAll(filepath.Join(root, "job2"), 0o700)
			os.WriteFile(filepath.Join(root, "job2", StatusFile), []byte("0\n"), 0o600)
			o := run("kill -9 $PPID")
			if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeScriptFailed || !strings.HasPrefix(o.Error.Message, "slurm job 4242 ") || o.ExitCode != nil {
				t.Fatalf("%+v %+v", o, o.Error)
			}
			o = run(`test "$PWD" = "$DREAMLAKE_WORKDIR" && test -f args.msgpack && exit 4`)
			if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeScriptFailed || o.Error.Message != "exit status 4" || o.ExitCode == nil || *o.ExitCode != 4 {
				t.Fatalf("%+v %+v", o, o.Error)
			}
			if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded}, run("true")); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// While the job runs, each look at it also reads the end of its output
// file into the run's Tail. (The fake sbatch does not redirect the job's
// output: the script writes slurm.out itself, as slurmd would.)
func TestOutputFileReachesTheTail(t *testing.T) {
	opt, _ := fakeSlurm(t, "all")
	root := t.TempDir()
	reg := runners.NewRegistry(runners.Config{Root: root, Entry: []string{entryPath}}, New(opt))
	tail := runners.NewTail()
	script := `echo "step 1" >> ` + OutputFile + `; while [ ! -e go ]; do sleep 0.02; done; echo "step 2" >> ` + OutputFile
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- reg.Execute(context.Background(), runners.Execution{Kind: runners.KindSlurm,
			Run: wire.Run{InvocationID: "job3", Script: &script,
				RunConfig: wire.RunConfig{Slurm: &wire.SlurmConfig{PollIntervalS: ptr(wire.Number(0.05))}}},
			Tail: tail})
	}()
	testkit.WaitUntil(t, 30*time.Second, "the job's output in the tail", func() bool { return tail.String() == "step 1\n" })
	if err := os.WriteFile(filepath.Join(root, "job3", "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded}, <-done); diff != "" {
		t.Fatal(diff)
	}
}

func TestScriptRefusesInjection(t *testing.T) {
	for _, cfg := range []wire.SlurmConfig{
		{Partition: "debug\n#SBATCH --uid=0"},
		{Time: "1:00 --wrap"},
		{Mem: "1G\nrm -rf /"},
	} {
		inv := runners.Invocation{Run: wire.Run{InvocationID: "i", RunConfig: wire.RunConfig{Slurm: &cfg}}, Workdir: "/w", Entry: []string{"e"}}
		if s, err := Script(inv); err == nil {
			t.Errorf("%+v accepted:\n%s", cfg, s)
		}
	}
}

func TestParseJobID(t *testing.T) {
	for out, want := range map[string]string{
		"Submitted batch job 12345\n":                "12345",
		"Submitted batch job 7 on cluster alpha\n":   "7",
		"sbatch: warning: x\nSubmitted batch job 42": "42",
	} {
		got, err := ParseJobID(out)
		if err != nil || got != want {
			t.Errorf("%q: %q, %v", out, got, err)
		}
	}
	for _, out := range []string{"", "sbatch: error: Batch job submission failed", "Submitted batch job x"} {
		if _, err := ParseJobID(out); err == nil {
			t.Errorf("%q accepted", out)
		}
	}
}

func TestMapState(t *testing.T) {
	for state, want := range map[string]Phase{
		"":                     Gone,
		"\n":                   Gone,
		"PENDING":              Active,
		"PD":                   Active,
		"RUNNING":              Active,
		"R":                    Active,
		"COMPLETING":           Active,
		"CG":                   Active,
		"CONFIGURING":          Active,
		"SUSPENDED":            Active,
		"COMPLETED":            Completed,
		"CD":                   Completed,
		"FAILED":               Failed,
		"F":                    Failed,
		"CANCELLED":            Failed,
		"CANCELLED by 0":       Failed,
		"CA":                   Failed,
		"TIMEOUT":              Failed,
		"TO":                   Failed,
		"NODE_FAIL":            Failed,
		"OUT_OF_MEMORY":        Failed,
		"COMPLETED\nCOMPLETED": Completed,
	} {
		if got := MapState(state); got != want {
			t.Errorf("%q: %v, want %v", state, got, want)
		}
	}
}

func TestSqueueArgv(t *testing.T) {
	if diff := cmp.Diff([]string{"-j", "12", "-h", "-o", "%T", "-t", "all"}, SqueueArgv("12")); diff != "" {
		t.Fatal(diff)
	}
}

// fakeSlurm writes sbatch/squeue/scancel stand-ins sharing a state file:
// sbatch runs the job script in the background and records its end state;
// squeue prints the state (or fails like slurmctld for a forgotten id
// when mode is "forget"; prints nothing when mode is "empty"); scancel
// marks the job CANCELLED and kills it.
// script writes an executable bash script named name into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/bash\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func fakeSlurm(t *testing.T, mode string) (Options, string) {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	write := func(name, body string) string { return script(t, dir, name, body) }
	opt := Options{
		Sbatch: write("sbatch", fmt.Sprintf(`
echo "$@" > %[1]s.sbatch-args
rm -f %[1]s.done
st() { echo "$1" > %[1]s.tmp.$$ && mv %[1]s.tmp.$$ %[1]s; }
st PENDING
( st RUNNING; bash "$1" & echo $! > %[1]s.pid; wait $!; rc=$?
  if [ "$(cat %[1]s)" != CANCELLED ]; then
    if [ $rc = 0 ]; then end=COMPLETED; else end=FAILED; fi
    case %[2]q in forget|empty) end=GONE;; esac
    st $end
  fi; echo done > %[1]s.done ) >/dev/null 2>&1 &
echo "Submitted batch job 4242"
`, state, mode)),
		Squeue: write("squeue", fmt.Sprintf(`
echo "$@" > %[1]s.squeue-args
s=$(cat %[1]s)
if [ "$s" = GONE ]; then
  if [ %[2]q = forget ]; then echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; fi
  exit 0
fi
echo "$s"
`, state, mode)),
		Scancel: write("scancel", fmt.Sprintf(`
echo "$@" > %[1]s.scancel-args
echo CANCELLED > %[1]s.tmp.$$ && mv %[1]s.tmp.$$ %[1]s
kill -TERM $(cat %[1]s.pid)
`, state)),
	}
	// The fake job outlives the runner by a moment; let it finish before
	// the temporary directories go.
	t.Cleanup(func() { testkit.WaitFile(t, 60*time.Second, state+".done") })
	return opt, state
}

func runJob(t *testing.T, opt Options, ctx context.Context, root, args string) runners.Outcome {
	t.Helper()
	reg := runners.NewRegistry(runners.Config{Root: root, Entry: []string{entryPath}}, New(opt))
	return reg.ExecuteAs(ctx, runners.KindSlurm, wire.Run{InvocationID: "job1", ArgsBlob: []byte(args),
		RunConfig: wire.RunConfig{Slurm: &wire.SlurmConfig{PollIntervalS: ptr(wire.Number(0.05))}}}, "")
}

func TestRunWithFakeSlurm(t *testing.T) {
	for _, mode := range []string{"all", "forget", "empty"} {
		t.Run(mode, func(t *testing.T) {
			opt, state := fakeSlurm(t, mode)
			root := t.TempDir()
			o := runJob(t, opt, context.Background(), root, "ok:from slurm")
			if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded, ResultBlob: []byte("from slurm")}, o); diff != "" {
				t.Fatal(diff)
			}
			if b, _ := os.ReadFile(state + ".sbatch-args"); strings.TrimSpace(string(b)) != filepath.Join(root, "job1", ScriptFile) {
				t.Fatalf("sbatch args %q", b)
			}
			o = runJob(t, opt, context.Background(), root, "fail:bad input")
			if o.State != wire.StateFailed || o.Error.Message != "ValueError: bad input" {
				t.Fatalf("%+v", o)
			}
			o = runJob(t, opt, context.Background(), root, "exit:3")
			if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon {
				t.Fatalf("%+v %+v", o, o.Error)
			}
		})
	}
}

// cancelledJob runs a job that sleeps under root and cancels it once
// it has started; it returns the run's outcome.
func cancelledJob(t *testing.T, opt Options, root string) runners.Outcome {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() { done <- runJob(t, opt, ctx, root, "sleep:60") }()
	testkit.WaitFile(t, 60*time.Second, filepath.Join(root, "job1", "started"))
	cancel()
	return <-done
}

func TestCancelRunsScancel(t *testing.T) {
	opt, state := fakeSlurm(t, "all")
	root := t.TempDir()
	if diff := cmp.Diff(runners.Killed(), cancelledJob(t, opt, root)); diff != "" {
		t.Fatal(diff)
	}
	if b, _ := os.ReadFile(state + ".scancel-args"); strings.TrimSpace(string(b)) != "4242" {
		t.Fatalf("scancel args %q", b)
	}
}

// A job scancel refuses when its run is cancelled keeps its id file, so
// the next start cancels it rather than forget it.
func TestCancelThatFailsKeepsTheJobRecord(t *testing.T) {
	opt, state := fakeSlurm(t, "all")
	real := opt.Scancel
	refusing := filepath.Join(t.TempDir(), "scancel")
	os.WriteFile(refusing, []byte("#!/bin/sh\necho 'scancel: error: Kill job error: Access/permission denied' >&2\nexit 1\n"), 0o755)
	opt.Scancel = refusing
	root := t.TempDir()
	cancelledJob(t, opt, root)
	if b, err := os.ReadFile(filepath.Join(root, "job1", JobIDFile)); err != nil || strings.TrimSpace(string(b)) != "4242" {
		t.Errorf("%s after a failed scancel: %q %v, want the job's id kept", JobIDFile, b, err)
	}
	// End the fake job, as the next start's sweep would.
	if out, err := exec.Command(real, "4242").CombinedOutput(); err != nil {
		t.Fatalf("stop the fake job: %v %s", err, out)
	}
	_ = state
}

// A leftover job scancel refuses is logged with its id, in scancel's
// error too, and its id file kept for the next start.
func TestReapFailureNamesTheJob(t *testing.T) {
	dir := t.TempDir()
	scancel := filepath.Join(dir, "scancel")
	os.WriteFile(scancel, []byte("#!/bin/sh\necho 'scancel: error: Kill job error: Access/permission denied' >&2\nexit 1\n"), 0o755)
	root := t.TempDir()
	idFile := filepath.Join(root, "inv-1", JobIDFile)
	os.MkdirAll(filepath.Dir(idFile), 0o700)
	os.WriteFile(idFile, []byte("4242\n"), 0o600)
	var logged strings.Builder
	runners.NewRegistry(runners.Config{Root: root, Log: slog.New(slog.NewTextHandler(&logged, nil))},
		New(Options{Scancel: scancel})).Reap(context.Background())
	for _, want := range []string{"slurm job of an earlier daemon's run not stopped", "id=4242", "scancel 4242: exit status 1: scancel: error: Kill job error"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logged.String())
		}
	}
	if _, err := os.Stat(idFile); err != nil {
		t.Errorf("id file of a job not cancelled removed: %v", err)
	}
}

// A shutdown while sbatch runs (the job may be submitted, its id never
// read) cancels the job by its name, which is the run's alone.
func TestShutdownDuringSbatchCancelsByName(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "scancel-args")
	write := func(name, body string) string { return script(t, dir, name, body) }
	opt := Options{Sbatch: write("sbatch", "touch "+dir+"/submitting; exec sleep 60\n"),
		Squeue: write("squeue", "exit 0\n"), Scancel: write("scancel", `echo "$@" > `+calls+"\n")}
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() { done <- runJob(t, opt, ctx, root, "ok:x") }()
	testkit.WaitFile(t, 20*time.Second, filepath.Join(dir, "submitting"))
	cancel()
	if o := <-done; o.State != wire.StateKilled {
		t.Fatalf("outcome %+v", o)
	}
	if b, err := os.ReadFile(calls); err != nil || strings.TrimSpace(string(b)) != "--name=nymph-job1" {
		t.Fatalf("scancel args %q %v, want the job cancelled by its name", b, err)
	}
}
