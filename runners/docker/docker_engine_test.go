//go:build unix

package docker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/docker"
	"github.com/nymphd/nymph/runners/internal/testbuild"
	"github.com/nymphd/nymph/wirecore/wire"
)

// These tests run the docker runner against a real docker engine: the one
// DOCKER_HOST names, with the local image NYMPH_TEST_DOCKER_IMAGE (CI starts
// both with .ci/engines.sh; no registry is reachable, so the image is
// imported, not pulled). They call Runner.Run on a workdir they prepare
// themselves where the default --user must be able to write.

// mountedEntry is where the static test entry program is bind-mounted.
const mountedEntry = "/nymph-test/testentry"

type engine struct {
	image    string
	entryDir string // holds testentry, bind-mounted read-only
}

// realEngine skips unless a docker engine answers and has the test image,
// and builds the test entry program (static, so busybox can run it).
func realEngine(t testing.TB) engine {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker client on PATH (.ci/engines.sh start installs docker.io)")
	}
	image := os.Getenv("NYMPH_TEST_DOCKER_IMAGE")
	if image == "" {
		t.Skip("NYMPH_TEST_DOCKER_IMAGE is not set: no local test image (eval \"$(bash .ci/engines.sh env)\")")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no docker engine answers at DOCKER_HOST=%q: %v: %s", os.Getenv("DOCKER_HOST"), err, out)
	}
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", image).CombinedOutput(); err != nil {
		t.Fatalf("NYMPH_TEST_DOCKER_IMAGE=%s is set but not loaded: %v: %s", image, err, out)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := testbuild.Entry(dir); err != nil {
		t.Fatal(err)
	}
	return engine{image: image, entryDir: dir}
}

// workdir makes an invocation workdir every container user can write, with
// args.msgpack holding args.
func workdir(t *testing.T, args string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "inv")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, runners.ArgsFile), []byte(args), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs one invocation on r in a fresh workdir, with the test entry
// mounted, and returns the outcome and the workdir.
func (e engine) run(ctx context.Context, t *testing.T, r *docker.Runner, id, args string, dc wire.DockerConfig) (runners.Outcome, string) {
	t.Helper()
	dir := workdir(t, args)
	dc.Volumes = append(dc.Volumes, e.entryDir+":/nymph-test:ro")
	o := r.Run(ctx, runners.Invocation{
		Run:     wire.Run{InvocationID: id, ArgsBlob: []byte(args), RunConfig: wire.RunConfig{Image: e.image, Docker: &dc}},
		Workdir: dir,
	})
	return o, dir
}

func ptr[T any](v T) *T { return &v }

// fileOwner is the uid:gid of a file.
func fileOwner(fi os.FileInfo) ([2]int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]int{}, false
	}
	return [2]int{int(st.Uid), int(st.Gid)}, true
}

// resultLines splits an `env` result into its lines.
func resultLines(o runners.Outcome) map[string]bool {
	lines := map[string]bool{}
	for _, l := range strings.Split(string(o.ResultBlob), "\n") {
		lines[l] = true
	}
	return lines
}

func TestEngineDockerUser(t *testing.T) {
	e := realEngine(t)
	// A daemon uid that is neither root nor the image's default user, so
	// the test can tell the runner's --user from docker's own default.
	r := docker.New(docker.Options{Entry: []string{mountedEntry}, UID: ptr(4242), GID: ptr(4343)})
	t.Run("default is the daemon's uid:gid", func(t *testing.T) {
		o, dir := e.run(context.Background(), t, r, "u-default", "env", wire.DockerConfig{})
		if o.State != wire.StateSucceeded || !resultLines(o)["uid=4242"] {
			t.Fatalf("outcome %+v %+v, result %q", o, o.Error, o.ResultBlob)
		}
		fi, err := os.Stat(filepath.Join(dir, runners.ResultFile))
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := fileOwner(fi); !ok || st != [2]int{4242, 4343} {
			t.Errorf("result.msgpack owned by %v, want 4242:4343", st)
		}
	})
	for _, args := range [][]string{{"--user", "0:0"}, {"--user=0:0"}, {"-u", "0"}, {"-u=0"}} {
		t.Run("caller's "+strings.Join(args, " ")+" wins", func(t *testing.T) {
			o, _ := e.run(context.Background(), t, r, "u-caller", "env", wire.DockerConfig{Args: args})
			if o.State != wire.StateSucceeded || !resultLines(o)["uid=0"] {
				t.Fatalf("outcome %+v %+v, result %q", o, o.Error, o.ResultBlob)
			}
		})
	}
}

func TestEngineDockerEnvAndArgs(t *testing.T) {
	e := realEngine(t)
	r := docker.New(docker.Options{Entry: []string{mountedEntry}})
	t.Run("invocation variables", func(t *testing.T) {
		run := wire.Run{InvocationID: "e-ids", ArgsBlob: []byte("env"), ParentInvocationID: ptr("p-1"), RootInvocationID: ptr("r-0"),
			RunConfig: wire.RunConfig{Image: e.image, Docker: &wire.DockerConfig{Volumes: []string{e.entryDir + ":/nymph-test:ro"}}}}
		dir := workdir(t, "env")
		o := r.Run(context.Background(), runners.Invocation{Run: run, Workdir: dir})
		lines := resultLines(o)
		for _, want := range []string{"DREAMLAKE_INVOCATION_ID=e-ids", "DREAMLAKE_WORKDIR=/workspace",
			"DREAMLAKE_PARENT_INVOCATION_ID=p-1", "DREAMLAKE_ROOT_INVOCATION_ID=r-0"} {
			if !lines[want] {
				t.Errorf("container env lacks %q: %q", want, o.ResultBlob)
			}
		}
	})
	t.Run("caller env with spaces and equals", func(t *testing.T) {
		o, _ := e.run(context.Background(), t, r, "e-caller", "getenv:NYMPH_PAIR",
			wire.DockerConfig{Env: map[string]string{"NYMPH_PAIR": "a=b c", "OTHER": "x"}})
		if o.State != wire.StateSucceeded || string(o.ResultBlob) != "a=b c" {
			t.Fatalf("%+v %+v %q", o, o.Error, o.ResultBlob)
		}
	})
	t.Run("raw args reach docker run", func(t *testing.T) {
		o, _ := e.run(context.Background(), t, r, "e-args", "env", wire.DockerConfig{Args: []string{"--workdir=/workspace"}})
		if !resultLines(o)["cwd=/workspace"] {
			t.Fatalf("--workdir not applied: %+v %q", o, o.ResultBlob)
		}
	})
}

// shellRunner runs a busybox shell line as the entry program.
func shellRunner(line string) *docker.Runner {
	return docker.New(docker.Options{Entry: []string{"/bin/sh", "-c", line}})
}

func TestEngineDockerVolumesAndNetwork(t *testing.T) {
	e := realEngine(t)
	t.Run("extra volume read-only", func(t *testing.T) {
		data := t.TempDir()
		if err := os.Chmod(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "input"), []byte("from the host"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := shellRunner(`cat /data/input > /workspace/result.msgpack && ! touch /data/written 2>/dev/null`)
		o, _ := e.run(context.Background(), t, r, "v-ro", "-", wire.DockerConfig{Volumes: []string{data + ":/data:ro"}})
		if o.State != wire.StateSucceeded || string(o.ResultBlob) != "from the host" {
			t.Fatalf("%+v %+v %q", o, o.Error, o.ResultBlob)
		}
		if _, err := os.Stat(filepath.Join(data, "written")); err == nil {
			t.Fatal("a :ro volume was written")
		}
	})
	t.Run("workdir writes land on the host", func(t *testing.T) {
		r := shellRunner(`echo side > /workspace/side.txt; echo -n done > /workspace/result.msgpack`)
		o, dir := e.run(context.Background(), t, r, "v-rw", "-", wire.DockerConfig{})
		if o.State != wire.StateSucceeded {
			t.Fatalf("%+v %+v", o, o.Error)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "side.txt")); err != nil || string(b) != "side\n" {
			t.Fatalf("side.txt: %q %v", b, err)
		}
	})
	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	netns := shellRunner(`/bin/busybox readlink /proc/self/ns/net > /workspace/result.msgpack`)
	t.Run("network defaults to host", func(t *testing.T) {
		o, _ := e.run(context.Background(), t, netns, "n-host", "-", wire.DockerConfig{})
		if got := strings.TrimSpace(string(o.ResultBlob)); got != hostNet {
			t.Fatalf("container netns %q, host %q (%+v)", got, hostNet, o.Error)
		}
	})
	t.Run("network none is its own namespace", func(t *testing.T) {
		o, _ := e.run(context.Background(), t, netns, "n-none", "-", wire.DockerConfig{Network: "none"})
		if got := strings.TrimSpace(string(o.ResultBlob)); o.State != wire.StateSucceeded || got == hostNet {
			t.Fatalf("container netns %q, host %q (%+v %+v)", got, hostNet, o, o.Error)
		}
	})
}

func TestEngineDockerOutcomes(t *testing.T) {
	e := realEngine(t)
	r := docker.New(docker.Options{Entry: []string{mountedEntry}})
	t.Run("error.json wins over the exit status", func(t *testing.T) {
		o, dir := e.run(context.Background(), t, r, "o-fail", "fail:bad input", wire.DockerConfig{})
		if o.State != wire.StateFailed || o.Error == nil || o.Error.TypeName != "ValueError" || o.Error.Message != "ValueError: bad input" {
			t.Fatalf("%+v %+v", o, o.Error)
		}
		if o.Error.Traceback == nil || *o.Error.Traceback != "Traceback: testentry" {
			t.Errorf("traceback %v", o.Error.Traceback)
		}
		if _, err := os.Stat(filepath.Join(dir, runners.ErrorFile)); err != nil {
			t.Error(err)
		}
	})
	t.Run("exit without files", func(t *testing.T) {
		o, _ := e.run(context.Background(), t, r, "o-exit", "exit:3", wire.DockerConfig{})
		if o.State != wire.StateFailed || o.Error == nil || o.Error.TypeName != wire.ErrTypeDaemon {
			t.Fatalf("%+v %+v", o, o.Error)
		}
	})
	t.Run("missing image", func(t *testing.T) {
		dir := workdir(t, "ok:x")
		o := r.Run(context.Background(), runners.Invocation{Workdir: dir, Run: wire.Run{InvocationID: "o-img", ArgsBlob: []byte("ok:x"),
			RunConfig: wire.RunConfig{Image: "nymph-test-absent:never", Docker: &wire.DockerConfig{Args: []string{"--pull=never"}}}}})
		if o.State != wire.StateFailed || o.Error == nil {
			t.Fatalf("%+v", o)
		}
	})
}

// containerGone polls `docker ps -a` until the container id is no longer
// listed: --rm removes it asynchronously after the client returned.
func containerGone(t *testing.T, cid string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("docker", "ps", "-a", "-q", "--no-trunc", "--filter", "id="+cid).Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still listed by docker ps -a: %q %v", cid, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startAndCancel starts a long run, waits for the entry program to be
// running, cancels, and returns the outcome and the container id.
func (e engine) startAndCancel(t *testing.T, r *docker.Runner, id, args string, dockerArgs []string) (runners.Outcome, string) {
	t.Helper()
	dir := workdir(t, args)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- r.Run(ctx, runners.Invocation{Workdir: dir, Run: wire.Run{InvocationID: id, ArgsBlob: []byte(args),
			RunConfig: wire.RunConfig{Image: e.image, Docker: &wire.DockerConfig{Args: dockerArgs, Volumes: []string{e.entryDir + ":/nymph-test:ro"}}}}})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			break
		}
		select {
		case o := <-done:
			t.Fatalf("ended before it started: %+v %+v", o, o.Error)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("entry program never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(dir, docker.CIDFile))
	cid := strings.TrimSpace(string(b))
	if err != nil || cid == "" {
		t.Fatalf("cidfile: %q %v", b, err)
	}
	if out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", cid).Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Fatalf("container %s not running before cancel: %q %v", cid, out, err)
	}
	cancel()
	select {
	case o := <-done:
		return o, cid
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60 s of cancel")
	}
	return runners.Outcome{}, ""
}

func TestEngineDockerCancel(t *testing.T) {
	e := realEngine(t)
	// --init puts docker's init in front of the entry program: a PID 1
	// without a SIGTERM handler of its own would only die at docker stop's
	// SIGKILL, 10 s later (that slow path is covered by TestRealDocker).
	r := docker.New(docker.Options{Entry: []string{mountedEntry}, KillGrace: 2 * time.Second})
	o, cid := e.startAndCancel(t, r, "c-term", "sleep:300", []string{"--init"})
	if o.State != wire.StateKilled {
		t.Fatalf("%+v %+v", o, o.Error)
	}
	containerGone(t, cid)
}

func TestEngineGVisor(t *testing.T) {
	e := realEngine(t)
	if os.Getenv("NYMPH_TEST_RUNSC") != "1" {
		t.Skip("NYMPH_TEST_RUNSC is not 1: runsc is not registered with this docker engine or cannot start a sandbox here (.ci/engines.sh decides)")
	}
	r := docker.NewGVisor(docker.Options{Entry: []string{mountedEntry}, KillGrace: 2 * time.Second})
	t.Run("success and env", func(t *testing.T) {
		o, _ := e.run(context.Background(), t, r, "g-env", "env", wire.DockerConfig{})
		lines := resultLines(o)
		if o.State != wire.StateSucceeded || !lines["DREAMLAKE_INVOCATION_ID=g-env"] || !lines["uid="+strconv.Itoa(os.Getuid())] {
			t.Fatalf("%+v %+v %q", o, o.Error, o.ResultBlob)
		}
	})
	t.Run("runs under the gVisor kernel", func(t *testing.T) {
		out, err := exec.Command("uname", "-r").Output()
		if err != nil {
			t.Fatal(err)
		}
		host := strings.TrimSpace(string(out))
		kernel := func(r *docker.Runner) string {
			t.Helper()
			o, _ := e.run(context.Background(), t, r, "g-kernel", "-", wire.DockerConfig{})
			if o.State != wire.StateSucceeded {
				t.Fatalf("%s: %+v %+v", r.Kind(), o, o.Error)
			}
			return strings.TrimSpace(string(o.ResultBlob))
		}
		line := `/bin/busybox uname -r > /workspace/result.msgpack`
		runc := kernel(docker.New(docker.Options{Entry: []string{"/bin/sh", "-c", line}}))
		runsc := kernel(docker.NewGVisor(docker.Options{Entry: []string{"/bin/sh", "-c", line}}))
		if runc != host {
			t.Errorf("runc container kernel %q, host %q", runc, host)
		}
		if runsc == runc {
			t.Errorf("gvisor container reports the host kernel %q: not sandboxed", runsc)
		}
	})
	t.Run("failure", func(t *testing.T) {
		o, _ := e.run(context.Background(), t, r, "g-fail", "fail:under gvisor", wire.DockerConfig{})
		if o.State != wire.StateFailed || o.Error == nil || o.Error.Message != "ValueError: under gvisor" {
			t.Fatalf("%+v %+v", o, o.Error)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		o, cid := e.startAndCancel(t, r, "g-cancel", "sleep:300", nil)
		if o.State != wire.StateKilled {
			t.Fatalf("%+v %+v", o, o.Error)
		}
		containerGone(t, cid)
	})
}

// Reap removes the container a run of a daemon killed outright left
// running (its cidfile still in the run's workdir), forgets a cidfile
// whose container is gone, and never hands the client a cidfile that
// does not hold a container id.
func TestReapRemovesLeftoverContainers(t *testing.T) {
	e := realEngine(t)
	root := t.TempDir()
	out, err := exec.Command("docker", "run", "-d", "--rm", e.image, "sleep", "300").Output()
	if err != nil {
		t.Fatalf("docker run -d: %v", err)
	}
	cid := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", cid).Run() })
	write := func(dir, content string) string {
		t.Helper()
		p := filepath.Join(root, dir, docker.CIDFile)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	running := write("inv-running", cid+"\n")
	gone := write("inv-gone", strings.Repeat("ab", 32))
	odd := write("inv-odd", "--help")

	runners.NewRegistry(runners.Config{Root: root}, docker.New(docker.Options{})).Reap(context.Background())

	if out, _ := exec.Command("docker", "ps", "-a", "-q", "--no-trunc", "--filter", "id="+cid).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("container %s still there after Reap", cid)
	}
	for _, p := range []string{running, gone} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s kept: %v", p, err)
		}
	}
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("a cidfile without a container id was removed: %v", err)
	}
}
