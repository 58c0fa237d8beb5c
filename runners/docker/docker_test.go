package docker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

func ptr[T any](v T) *T { return &v }

func testRunner(opt Options) *Runner {
	opt.UID, opt.GID = ptr(1000), ptr(1001)
	return New(opt)
}

func TestRunArgv(t *testing.T) {
	base := func(mod func(*wire.Run)) runners.Invocation {
		run := wire.Run{InvocationID: "inv1", RunConfig: wire.RunConfig{Runner: "docker", Image: "img:1"}}
		if mod != nil {
			mod(&run)
		}
		return runners.Invocation{Run: run, Workdir: "/var/lib/udf/inv1"}
	}
	head := []string{"run", "--rm", "-i", "--runtime=runc", "--cidfile", "/var/lib/udf/inv1/container.cid", "--network=host", "-v", "/var/lib/udf/inv1:/workspace"}
	dl := []string{"-e", "DREAMLAKE_INVOCATION_ID=inv1", "-e", "DREAMLAKE_WORKDIR=/workspace"}
	tail := []string{"img:1", "python", "-m", "dreamlake.lakeshore.daemon.entry"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	user := []string{"--user", "1000:1001"}
	for _, tc := range []struct {
		name string
		r    *Runner
		inv  runners.Invocation
		want []string
	}{
		{"defaults", testRunner(Options{}), base(nil), cat(head, dl, user, tail)},
		{"gvisor", NewGVisor(Options{UID: ptr(1000), GID: ptr(1001)}), base(nil),
			cat([]string{"run", "--rm", "-i", "--runtime=runsc"}, head[4:], dl, user, tail)},
		{"everything", testRunner(Options{}), base(func(r *wire.Run) {
			r.ParentInvocationID, r.RootInvocationID = ptr("p1"), ptr("r1")
			r.RunConfig.Docker = &wire.DockerConfig{
				Network: "none",
				Env:     map[string]string{"B": "2", "A": "1 and space"},
				Volumes: []string{"/data:/data:ro", "/models:/models"},
				Args:    []string{"--gpus", "all", "--shm-size=1g"},
			}
		}), cat(
			[]string{"run", "--rm", "-i", "--runtime=runc", "--cidfile", "/var/lib/udf/inv1/container.cid", "--network=none",
				"-v", "/var/lib/udf/inv1:/workspace", "-v", "/data:/data:ro", "-v", "/models:/models",
				"-e", "A=1 and space", "-e", "B=2"},
			dl, []string{"-e", "DREAMLAKE_PARENT_INVOCATION_ID=p1", "-e", "DREAMLAKE_ROOT_INVOCATION_ID=r1"},
			[]string{"--gpus", "all", "--shm-size=1g"}, user, tail)},
		{"caller --user", testRunner(Options{}), base(func(r *wire.Run) {
			r.RunConfig.Docker = &wire.DockerConfig{Args: []string{"--user", "0:0"}}
		}), cat(head, dl, []string{"--user", "0:0"}, tail)},
		{"caller -u", testRunner(Options{}), base(func(r *wire.Run) {
			r.RunConfig.Docker = &wire.DockerConfig{Args: []string{"-u", "nobody"}}
		}), cat(head, dl, []string{"-u", "nobody"}, tail)},
		{"caller --user=", testRunner(Options{}), base(func(r *wire.Run) {
			r.RunConfig.Docker = &wire.DockerConfig{Args: []string{"--user=5"}}
		}), cat(head, dl, []string{"--user=5"}, tail)},
		{"custom entry", testRunner(Options{Entry: []string{"/workspace/entry", "-v"}}), base(nil),
			cat(head, dl, user, []string{"img:1", "/workspace/entry", "-v"})},
		{"script", testRunner(Options{Entry: []string{"/workspace/entry"}}), base(func(r *wire.Run) {
			r.Script = ptr("echo 'hi' $HOME")
			r.RunConfig.Docker = &wire.DockerConfig{Args: []string{"--gpus", "all"}}
		}), cat(head, dl, []string{"-w", "/workspace", "--gpus", "all"}, user, []string{"img:1", "bash", "-c", "echo 'hi' $HOME"})},
	} {
		if diff := cmp.Diff(tc.want, tc.r.RunArgv(tc.inv)); diff != "" {
			t.Errorf("%s: %s", tc.name, diff)
		}
	}
}

func TestHasUserFlag(t *testing.T) {
	for args, want := range map[string]bool{
		"":                  false,
		"--gpus all":        false,
		"--user 1":          true,
		"--user=1":          true,
		"-u 1":              true,
		"-u1":               true,
		"--userns host":     false,
		"--shm-size=1g -it": false,
	} {
		if got := HasUserFlag(strings.Fields(args)); got != want {
			t.Errorf("%q: %v", args, got)
		}
	}
}

func TestPassword(t *testing.T) {
	env := map[string]string{"REG_PW": "from-env", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct {
		auth    wire.RegistryAuth
		want    string
		wantErr bool
	}{
		{wire.RegistryAuth{Password: "lit", PasswordEnv: "REG_PW"}, "from-env", false},
		{wire.RegistryAuth{PasswordEnv: "REG_PW"}, "from-env", false},
		{wire.RegistryAuth{Password: "lit"}, "lit", false},
		{wire.RegistryAuth{Password: "lit", PasswordEnv: "MISSING"}, "lit", false},
		{wire.RegistryAuth{Password: "lit", PasswordEnv: "EMPTY"}, "lit", false},
		{wire.RegistryAuth{PasswordEnv: "MISSING"}, "", true},
		{wire.RegistryAuth{}, "", true},
	} {
		got, err := Password(tc.auth, lookup)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%+v: %q, %v", tc.auth, got, err)
		}
	}
}

// fakeDocker writes a docker client stand-in that records each call
// (argv, stdin, the password variable) under dir/calls and acts per verb.
func fakeDocker(t *testing.T, loginOK bool) (bin, calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	loginExit := "1"
	if loginOK {
		loginExit = "0"
	}
	script := `#!/bin/bash
calls=` + calls + `
n=$(ls "$calls" 2>/dev/null | grep -c argv); mkdir -p "$calls"; rec="$calls/$n-$1"
printf '%s\n' "$@" > "$rec.argv"
echo "REG_PW=${REG_PW-unset}" > "$rec.env"
case "$1" in
login)
	pw=$(cat); echo "$pw" > "$rec.stdin"
	echo "Error response from daemon: login attempt with password $pw denied" >&2
	exit ` + loginExit + ` ;;
run)
	script=; prev=
	for a; do [ "$prev" = bash ] && [ "$a" = -c ] && script=1; [ "$script" = 1 ] && [ "$prev" = -c ] && script=$a; prev=$a; done
	while [ $# -gt 0 ]; do case "$1" in --cidfile) cid="$2"; shift;; esac; shift; done
	wd=$(dirname "$cid"); echo "fakecid123" > "$cid"
	if [ -n "$script" ]; then cd "$wd" && exec bash -c "$script"; fi
	case "$(cat "$wd/args.msgpack")" in
	ok) printf 'result' > "$wd/result.msgpack" ;;
	fail) echo '{"type":"RuntimeError","message":"in container"}' > "$wd/error.json"; exit 1 ;;
	hang) echo started > "$wd/started"; exec sleep 60 ;;
	esac ;;
stop) if [ -e "` + dir + `/stop-hangs" ]; then exec sleep 3600; fi
	if [ -e "` + dir + `/stop-fails" ]; then echo "Error response from daemon: cannot stop container" >&2; exit 1; fi ;;
rm) if [ -e "` + dir + `/rm-fails" ]; then echo "Error response from daemon: cannot remove container" >&2; exit 1; fi ;;
esac
`
	bin = filepath.Join(dir, "docker")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, calls
}

func callNames(t *testing.T, calls string) []string {
	t.Helper()
	entries, _ := os.ReadDir(calls)
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".argv"); ok {
			names = append(names, n)
		}
	}
	return names
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func execute(t *testing.T, r *Runner, root string, run wire.Run) runners.Outcome {
	t.Helper()
	return runners.NewRegistry(runners.Config{Root: root}, r).ExecuteAs(context.Background(), runners.KindDocker, run, "")
}

func TestImageRequired(t *testing.T) {
	bin, calls := fakeDocker(t, true)
	o := execute(t, testRunner(Options{Docker: bin}), t.TempDir(), wire.Run{InvocationID: "i", RunConfig: wire.RunConfig{Runner: "docker"}})
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeImageRequired {
		t.Fatalf("%+v", o)
	}
	if n := callNames(t, calls); len(n) != 0 {
		t.Fatalf("docker called: %v", n)
	}
}

func authRun(args string) wire.Run {
	return wire.Run{InvocationID: "i", ArgsBlob: []byte(args), RunConfig: wire.RunConfig{Runner: "docker", Image: "reg.example/img", Docker: &wire.DockerConfig{
		RegistryAuth: &wire.RegistryAuth{Server: "reg.example", Username: "bob", Password: "literal-pw", PasswordEnv: "REG_PW"}}}}
}

func TestRegistryAuthFailureRedactsAndSkipsRun(t *testing.T) {
	bin, calls := fakeDocker(t, false)
	env := append(os.Environ(), "REG_PW=s3cr3t-from-env")
	r := testRunner(Options{Docker: bin, BaseEnv: env, LookupEnv: func(k string) (string, bool) {
		if k == "REG_PW" {
			return "s3cr3t-from-env", true
		}
		return "", false
	}})
	o := execute(t, r, t.TempDir(), authRun("ok"))
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeRegistryAuth {
		t.Fatalf("%+v", o)
	}
	if strings.Contains(o.Error.Message, "s3cr3t") || !strings.Contains(o.Error.Message, "password "+Redacted+" denied") {
		t.Fatalf("message not redacted: %q", o.Error.Message)
	}
	if diff := cmp.Diff([]string{"0-login"}, callNames(t, calls)); diff != "" {
		t.Fatalf("calls: %s", diff)
	}
	argv := readFile(t, filepath.Join(calls, "0-login.argv"))
	if diff := cmp.Diff("login\nreg.example\n--username\nbob\n--password-stdin\n", argv); diff != "" {
		t.Fatal(diff)
	}
	if got := readFile(t, filepath.Join(calls, "0-login.stdin")); got != "s3cr3t-from-env\n" {
		t.Fatalf("stdin %q: password_env must win", got)
	}
	if got := readFile(t, filepath.Join(calls, "0-login.env")); got != "REG_PW=unset\n" {
		t.Fatalf("secret variable reached the docker client: %q", got)
	}
}

func TestRegistryAuthThenRun(t *testing.T) {
	bin, calls := fakeDocker(t, true)
	r := testRunner(Options{Docker: bin, LookupEnv: func(string) (string, bool) { return "", false }})
	o := execute(t, r, t.TempDir(), authRun("ok"))
	if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded, ResultBlob: []byte("result")}, o); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff([]string{"0-login", "1-run"}, callNames(t, calls)); diff != "" {
		t.Fatal(diff)
	}
	if got := readFile(t, filepath.Join(calls, "0-login.stdin")); got != "literal-pw\n" {
		t.Fatalf("stdin %q", got)
	}
	for _, name := range []string{"0-login.argv", "1-run.argv"} {
		if strings.Contains(readFile(t, filepath.Join(calls, name)), "literal-pw") {
			t.Fatalf("password in %s", name)
		}
	}
}

func TestRunFailureSurfacesErrorJSON(t *testing.T) {
	bin, _ := fakeDocker(t, true)
	root := t.TempDir()
	o := execute(t, testRunner(Options{Docker: bin}), root, wire.Run{InvocationID: "f", ArgsBlob: []byte("fail"), RunConfig: wire.RunConfig{Runner: "docker", Image: "x"}})
	if o.State != wire.StateFailed || o.Error.Message != "RuntimeError: in container" {
		t.Fatalf("%+v", o)
	}
	if _, err := os.Stat(filepath.Join(root, "f", "error.json")); err != nil {
		t.Fatal("failed workdir not kept")
	}
}

func TestCancelStopsContainer(t *testing.T) {
	bin, calls := fakeDocker(t, true)
	root := t.TempDir()
	r := testRunner(Options{Docker: bin, KillGrace: 200 * time.Millisecond, DrainGrace: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- runners.NewRegistry(runners.Config{Root: root}, r).ExecuteAs(ctx, runners.KindDocker, wire.Run{InvocationID: "h", ArgsBlob: []byte("hang"), RunConfig: wire.RunConfig{Image: "x"}}, "")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(root, "h", "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fake container never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if diff := cmp.Diff(runners.Killed(), <-done); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff("stop\nfakecid123\n", readFile(t, filepath.Join(calls, "1-stop.argv"))); diff != "" {
		t.Fatal(diff)
	}
}

func TestScriptByExitStatus(t *testing.T) {
	bin, _ := fakeDocker(t, true)
	root := t.TempDir()
	r := testRunner(Options{Docker: bin})
	run := func(id, script string) runners.Outcome {
		return execute(t, r, root, wire.Run{InvocationID: id, Script: ptr(script), RunConfig: wire.RunConfig{Runner: "docker", Image: "x"}})
	}
	// Exit 0 succeeds with an empty result, whatever the workdir holds.
	if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded}, run("s0", "echo '{}' > error.json")); diff != "" {
		t.Fatal(diff)
	}
	o := run("s3", "exit 3")
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeScriptFailed || o.Error.Message != "exit status 3" || o.ExitCode == nil || *o.ExitCode != 3 {
		t.Fatalf("%+v %+v", o, o.Error)
	}
	// 127: most likely an image without bash, and the message says so.
	o = run("s127", "exit 127")
	if o.State != wire.StateFailed || !strings.HasPrefix(o.Error.Message, "exit status 127 (command not found: the image has no bash") {
		t.Fatalf("%+v", o.Error)
	}
	if _, err := os.Stat(filepath.Join(root, "s3")); err != nil {
		t.Fatal("failed script's workdir not kept")
	}
}

// The cidfile names the container only while the run's client carries
// it: once the client returns it is removed, so a kept workdir costs the
// next start nothing; it stays only when the container could not be
// stopped, as the leftover the next start removes.
func TestCIDFileGoesWithTheClient(t *testing.T) {
	bin, calls := fakeDocker(t, true)
	root := t.TempDir()
	r := testRunner(Options{Docker: bin, KillGrace: 200 * time.Millisecond, DrainGrace: 200 * time.Millisecond})
	// A failed run's workdir is kept, for inspection.
	execute(t, r, root, wire.Run{InvocationID: "failed", ArgsBlob: []byte("fail"), RunConfig: wire.RunConfig{Image: "x"}})
	if _, err := os.Stat(filepath.Join(root, "failed", CIDFile)); !os.IsNotExist(err) {
		t.Errorf("%s kept after the client returned: %v", CIDFile, err)
	}
	cancelled := func(id string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan runners.Outcome, 1)
		go func() {
			done <- runners.NewRegistry(runners.Config{Root: root}, r).ExecuteAs(ctx, runners.KindDocker, wire.Run{InvocationID: id, ArgsBlob: []byte("hang"), RunConfig: wire.RunConfig{Image: "x"}}, "")
		}()
		testkit.WaitFile(t, 10*time.Second, filepath.Join(root, id, "started"))
		cancel()
		<-done
	}
	cancelled("stopped")
	if _, err := os.Stat(filepath.Join(root, "stopped", CIDFile)); !os.IsNotExist(err) {
		t.Errorf("%s kept after docker stop: %v", CIDFile, err)
	}
	os.WriteFile(filepath.Join(filepath.Dir(calls), "stop-fails"), nil, 0o600)
	cancelled("stuck")
	if b, err := os.ReadFile(filepath.Join(root, "stuck", CIDFile)); err != nil || strings.TrimSpace(string(b)) != "fakecid123" {
		t.Errorf("%s of a container docker could not stop: %q %v, want it kept", CIDFile, b, err)
	}
}

// A docker stop that hangs (a wedged dockerd) is given up after its
// timeout: the cancelled run returns, its cidfile kept for the next
// start, rather than hold the daemon's drain for good.
func TestHangingDockerStopIsBounded(t *testing.T) {
	bin, calls := fakeDocker(t, true)
	root := t.TempDir()
	r := testRunner(Options{Docker: bin, KillGrace: 200 * time.Millisecond, DrainGrace: 200 * time.Millisecond, StopTimeout: time.Second})
	os.WriteFile(filepath.Join(filepath.Dir(calls), "stop-hangs"), nil, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- runners.NewRegistry(runners.Config{Root: root}, r).ExecuteAs(ctx, runners.KindDocker, wire.Run{InvocationID: "wedged", ArgsBlob: []byte("hang"), RunConfig: wire.RunConfig{Image: "x"}}, "")
	}()
	testkit.WaitFile(t, 10*time.Second, filepath.Join(root, "wedged", "started"))
	cancel()
	select {
	case o := <-done:
		if o.State == wire.StateSucceeded {
			t.Errorf("outcome %+v", o)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled run did not return within 20 s of a 1 s stop timeout")
	}
	if b, err := os.ReadFile(filepath.Join(root, "wedged", CIDFile)); err != nil || strings.TrimSpace(string(b)) != "fakecid123" {
		t.Errorf("%s after a docker stop that timed out: %q %v, want it kept", CIDFile, b, err)
	}
}

// The docker and gvisor runners leave the same cidfile: with both
// offered, a leftover is handed to the client once, even one the client
// fails to remove (which stays for the next start).
func TestReapRemovesALeftoverOnce(t *testing.T) {
	bin, calls := fakeDocker(t, true)
	os.WriteFile(filepath.Join(filepath.Dir(calls), "rm-fails"), nil, 0o600)
	root := t.TempDir()
	cidfile := filepath.Join(root, "inv-1", CIDFile)
	os.MkdirAll(filepath.Dir(cidfile), 0o700)
	os.WriteFile(cidfile, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	var logged strings.Builder
	reg := runners.NewRegistry(runners.Config{Root: root, Log: slog.New(slog.NewTextHandler(&logged, nil))},
		testRunner(Options{Docker: bin}), NewGVisor(Options{Docker: bin}))
	reg.Reap(context.Background())
	if diff := cmp.Diff([]string{"0-rm"}, callNames(t, calls)); diff != "" {
		t.Errorf("docker calls: %s", diff)
	}
	if n := strings.Count(logged.String(), "run not stopped"); n != 1 {
		t.Errorf("leftover logged %d times, want once:\n%s", n, logged.String())
	}
	if _, err := os.Stat(cidfile); err != nil {
		t.Errorf("%s of a container not removed: %v", CIDFile, err)
	}
}

// A run redelivered in the same daemon finds the cidfile its earlier
// delivery kept (its container could not be stopped): the container is
// removed before the new one is made, and when it cannot be, the run
// fails with the record kept rather than forgetting a live container.
func TestRedeliveryRemovesTheEarlierContainer(t *testing.T) {
	bin, calls := fakeDocker(t, true)
	root := t.TempDir()
	r := testRunner(Options{Docker: bin})
	cid := strings.Repeat("ab", 32)
	earlier := func(id string) string {
		t.Helper()
		path := filepath.Join(root, id, CIDFile)
		os.MkdirAll(filepath.Dir(path), 0o700)
		os.WriteFile(path, []byte(cid+"\n"), 0o600)
		return path
	}
	earlier("again")
	if o := execute(t, r, root, wire.Run{InvocationID: "again", ArgsBlob: []byte("ok"), RunConfig: wire.RunConfig{Image: "x"}}); o.State != wire.StateSucceeded {
		t.Fatalf("redelivered run: %+v", o)
	}
	if diff := cmp.Diff([]string{"0-rm", "1-run"}, callNames(t, calls)); diff != "" {
		t.Errorf("docker calls: %s", diff)
	}
	if argv := readFile(t, filepath.Join(calls, "0-rm.argv")); !strings.Contains(argv, cid) {
		t.Errorf("rm argv %q does not name the earlier container", argv)
	}

	os.WriteFile(filepath.Join(filepath.Dir(calls), "rm-fails"), nil, 0o600)
	path := earlier("stuck")
	o := execute(t, r, root, wire.Run{InvocationID: "stuck", ArgsBlob: []byte("ok"), RunConfig: wire.RunConfig{Image: "x"}})
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon || !strings.Contains(o.Error.Message, "earlier delivery") {
		t.Errorf("run whose earlier container could not be removed: %+v", o)
	}
	if got := strings.TrimSpace(readFile(t, path)); got != cid {
		t.Errorf("%s = %q, want the earlier container's id kept", CIDFile, got)
	}
	if n := len(callNames(t, calls)); n != 3 {
		t.Errorf("%d docker calls, want the two before and one rm: %v", n, callNames(t, calls))
	}
}
