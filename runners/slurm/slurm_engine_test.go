package slurm_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/internal/testbuild"
	"github.com/nymphd/nymph/runners/slurm"
	"github.com/nymphd/nymph/wirecore/wire"
)

// These tests run the slurm runner against a real single-node cluster
// (CI starts one with .ci/engines.sh): real sbatch, squeue and scancel, a
// job that runs the static test entry program in the shared workdir.

type cluster struct {
	entry string
	root  string
}

// clusterState asks the controller once per test binary: a client without
// a controller can take its whole message timeout to give up.
var clusterState = sync.OnceValues(func() (string, error) {
	conf := os.Getenv("SLURM_CONF")
	if conf == "" {
		conf = "/etc/slurm/slurm.conf"
	}
	if _, err := os.Stat(conf); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sinfo", "-h", "-N", "-o", "%t").Output()
	return strings.TrimSpace(string(out)), err
})

// realCluster skips unless a SLURM controller answers and its node takes
// jobs, and builds the test entry program.
func realCluster(t *testing.T) cluster {
	t.Helper()
	for _, bin := range []string{"sinfo", "sbatch", "squeue", "scancel", "scontrol"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no SLURM client here: %s is not on PATH (.ci/engines.sh start installs slurm-client)", bin)
		}
	}
	state, err := clusterState()
	if err != nil {
		t.Skipf("no SLURM cluster answers here (.ci/engines.sh start runs one): %v", err)
	}
	switch {
	case strings.HasPrefix(state, "idle"), strings.HasPrefix(state, "mix"), strings.HasPrefix(state, "alloc"):
	default:
		t.Fatalf("SLURM answers but its node is %q: jobs would never start", state)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entry, err := testbuild.Entry(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cluster{entry: entry, root: t.TempDir()}
}

// uniqueID makes invocation ids (and so job names) that no earlier test
// run left in slurmctld's memory of ended jobs.
func uniqueID(name string) string {
	return name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func (c cluster) run(ctx context.Context, r *slurm.Runner, id, args string, cfg wire.SlurmConfig) runners.Outcome {
	if cfg.PollIntervalS == nil {
		cfg.PollIntervalS = ptr(wire.Number(0.2))
	}
	reg := runners.NewRegistry(runners.Config{Root: c.root, Entry: []string{c.entry}}, r)
	return reg.ExecuteAs(ctx, runners.KindSlurm, wire.Run{InvocationID: id, ArgsBlob: []byte(args), RunConfig: wire.RunConfig{Slurm: &cfg}}, "")
}

func ptr[T any](v T) *T { return &v }

// jobID finds the job the runner submitted for an invocation, by name.
func jobID(t *testing.T, invocation string) string {
	t.Helper()
	out, err := exec.Command("squeue", "-h", "-t", "all", "-n", "nymph-"+invocation, "-o", "%i").Output()
	id := strings.TrimSpace(string(out))
	if err != nil || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("no single job named nymph-%s: %q %v", invocation, out, err)
	}
	return id
}

// jobFields is `scontrol show job -o ID` as key → value.
func jobFields(t *testing.T, id string) map[string]string {
	t.Helper()
	out, err := exec.Command("scontrol", "show", "job", "-o", id).Output()
	if err != nil {
		t.Fatalf("scontrol show job %s: %v", id, err)
	}
	fields := map[string]string{}
	for _, kv := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

func waitFile(t *testing.T, path string, done <-chan runners.Outcome) {
	t.Helper()
	testkit.WaitUntil(t, 60*time.Second, path+" to appear", func() bool {
		select {
		case o := <-done:
			t.Fatalf("run ended before %s appeared: %+v %+v", path, o, o.Error)
		default:
		}
		_, err := os.Stat(path)
		return err == nil
	})
}

// TestEngineSlurmDirectivesAndScancel checks that the job carries the
// run_config.slurm resources as slurmctld sees them, and that cancelling
// the run (the daemon's grace expired) scancels the job: killed, and the
// controller records CANCELLED.
func TestEngineSlurmDirectivesAndScancel(t *testing.T) {
	c := realCluster(t)
	id := uniqueID("dir")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- c.run(ctx, slurm.New(slurm.Options{}), id, "sleep:300", wire.SlurmConfig{
			Partition: "debug", Time: "00:07:00", Nodes: "1", NtasksPerNode: "1", CPUsPerTask: "1", Mem: "100M"})
	}()
	workdir := filepath.Join(c.root, id)
	waitFile(t, filepath.Join(workdir, "started"), done)
	job := jobID(t, id)
	f := jobFields(t, job)
	for k, want := range map[string]string{"JobState": "RUNNING", "Partition": "debug", "TimeLimit": "00:07:00",
		"NumNodes": "1", "CPUs/Task": "1", "MinMemoryNode": "100M", "WorkDir": workdir,
		"StdOut": filepath.Join(workdir, slurm.OutputFile), "JobName": "nymph-" + id} {
		if f[k] != want {
			t.Errorf("job %s %s=%q, want %q", job, k, f[k], want)
		}
	}
	cancel()
	select {
	case o := <-done:
		if o.State != wire.StateKilled {
			t.Fatalf("cancelled run: %+v %+v", o, o.Error)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60 s of cancel")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("squeue", slurm.SqueueArgv(job)...).Output()
		if err == nil && strings.TrimSpace(string(out)) == "CANCELLED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s after scancel: %q %v", job, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(workdir); err != nil {
		t.Errorf("workdir of a killed run not kept: %v", err)
	}
}

// queueWithoutHistory is squeue as a runner sees it when the controller no
// longer remembers an ended job: the real squeue without `-t all`, which
// prints an empty line once the job has left the queue.
func queueWithoutHistory(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("squeue")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "squeue")
	script := `#!/bin/sh
skip=0
for a do
  shift
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  if [ "$a" = -t ]; then skip=1; continue; fi
  set -- "$@" "$a"
done
exec ` + real + ` "$@"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEngineSlurmJobLeavesQueue checks the outcome of a job that is gone
// from the queue without a final state seen: result.msgpack and error.json
// in the shared workdir decide.
func TestEngineSlurmJobLeavesQueue(t *testing.T) {
	c := realCluster(t)
	r := slurm.New(slurm.Options{Squeue: queueWithoutHistory(t)})
	t.Run("result file: succeeded", func(t *testing.T) {
		o := c.run(context.Background(), r, uniqueID("gone-ok"), "ok:after the queue", wire.SlurmConfig{})
		if o.State != wire.StateSucceeded || string(o.ResultBlob) != "after the queue" {
			t.Fatalf("%+v %+v", o, o.Error)
		}
	})
	t.Run("error file: failed with it", func(t *testing.T) {
		id := uniqueID("gone-fail")
		o := c.run(context.Background(), r, id, "fail:diverged", wire.SlurmConfig{})
		if o.State != wire.StateFailed || o.Error == nil || o.Error.TypeName != "ValueError" || o.Error.Message != "ValueError: diverged" {
			t.Fatalf("%+v %+v", o, o.Error)
		}
		if _, err := os.Stat(filepath.Join(c.root, id, runners.ErrorFile)); err != nil {
			t.Errorf("failed workdir not kept: %v", err)
		}
	})
	t.Run("neither file: failed", func(t *testing.T) {
		o := c.run(context.Background(), r, uniqueID("gone-none"), "exit0", wire.SlurmConfig{})
		// The message names the path taken: the job was seen leaving the
		// queue, not ending in a state.
		if o.State != wire.StateFailed || o.Error == nil || o.Error.TypeName != wire.ErrTypeDaemon || !strings.Contains(o.Error.Message, "left the queue") {
			t.Fatalf("%+v %+v", o, o.Error)
		}
	})
}

// TestEngineSlurmRejectedSubmission checks that sbatch refusing a job (more
// memory than the node has) fails the run with sbatch's reason.
func TestEngineSlurmRejectedSubmission(t *testing.T) {
	c := realCluster(t)
	o := c.run(context.Background(), slurm.New(slurm.Options{}), uniqueID("reject"), "ok:never", wire.SlurmConfig{Mem: "100000000M"})
	if o.State != wire.StateFailed || o.Error == nil || o.Error.TypeName != wire.ErrTypeDaemon || !strings.Contains(o.Error.Message, "sbatch") {
		t.Fatalf("%+v %+v", o, o.Error)
	}
}

// TestEngineSlurmConcurrentJobs runs two invocations at once on the
// one-node cluster: each is followed by its own job id.
func TestEngineSlurmConcurrentJobs(t *testing.T) {
	c := realCluster(t)
	r := slurm.New(slurm.Options{})
	results := make(chan runners.Outcome, 2)
	for _, text := range []string{"first", "second"} {
		go func() {
			results <- c.run(context.Background(), r, uniqueID("conc-"+text), "ok:"+text, wire.SlurmConfig{CPUsPerTask: "1"})
		}()
	}
	got := map[string]bool{}
	for range 2 {
		o := <-results
		if o.State != wire.StateSucceeded {
			t.Fatalf("%+v %+v", o, o.Error)
		}
		got[string(o.ResultBlob)] = true
	}
	if !got["first"] || !got["second"] {
		t.Fatalf("results %v", got)
	}
}

// A run records its job's id in its workdir while it follows the job and
// removes it when the run ends; Reap cancels the job a leftover id file
// names (its daemon was killed outright), forgets one slurmctld no longer
// knows, and never hands scancel a file that does not hold a job id.
func TestEngineSlurmReapCancelsLeftoverJobs(t *testing.T) {
	c := realCluster(t)
	id := uniqueID("reap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan runners.Outcome, 1)
	go func() { done <- c.run(ctx, slurm.New(slurm.Options{}), id, "sleep:300", wire.SlurmConfig{}) }()
	workdir := filepath.Join(c.root, id)
	waitFile(t, filepath.Join(workdir, "started"), done)
	job := jobID(t, id)
	if b, err := os.ReadFile(filepath.Join(workdir, slurm.JobIDFile)); err != nil || strings.TrimSpace(string(b)) != job {
		t.Fatalf("%s while the job runs: %q, %v; want %s", slurm.JobIDFile, b, err, job)
	}
	cancel()
	<-done
	if _, err := os.Stat(filepath.Join(workdir, slurm.JobIDFile)); !os.IsNotExist(err) {
		t.Errorf("%s kept after the run ended: %v", slurm.JobIDFile, err)
	}

	// What a daemon killed outright leaves: a job nobody follows.
	root := t.TempDir()
	out, err := exec.Command("sbatch", "--parsable", "--job-name", "nymph-"+uniqueID("orphan"), "-o", "/dev/null", "--wrap", "sleep 300").Output()
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	orphan := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { _ = exec.Command("scancel", orphan).Run() })
	write := func(dir, content string) string {
		t.Helper()
		p := filepath.Join(root, dir, slurm.JobIDFile)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	left := write("inv-left", orphan+"\n")
	unknown := write("inv-unknown", "987654321")
	odd := write("inv-odd", "--signal=KILL 1")

	runners.NewRegistry(runners.Config{Root: root}, slurm.New(slurm.Options{})).Reap(context.Background())

	testkit.WaitUntil(t, 30*time.Second, "job "+orphan+" cancelled", func() bool {
		out, err := exec.Command("squeue", slurm.SqueueArgv(orphan)...).Output()
		return err == nil && strings.TrimSpace(string(out)) == "CANCELLED"
	})
	for _, p := range []string{left, unknown} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s kept: %v", p, err)
		}
	}
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("a file without a job id was removed: %v", err)
	}
}
