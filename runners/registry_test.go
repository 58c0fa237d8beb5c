package runners

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/wirecore/wire"
)

// ExecuteAs takes the kind the core resolved as it is: run_config.runner
// is not read, a default is not applied, an alias is not resolved again.
func TestExecuteAsTakesTheResolvedKind(t *testing.T) {
	root := t.TempDir()
	proc := &fakeRunner{kind: KindProcess, write: map[string]string{ResultFile: "res"}}
	r := NewRegistry(Config{Root: root}, proc)
	run := wire.Run{InvocationID: "inv-1", RunConfig: wire.RunConfig{Runner: "lambda"}}
	if o := r.ExecuteAs(context.Background(), KindProcess, run, "inv-1"); o.State != wire.StateSucceeded {
		t.Fatalf("resolved kind process: %+v", o)
	}
	for _, kind := range []string{KindSubprocess, KindDocker, ""} {
		o := r.ExecuteAs(context.Background(), kind, wire.Run{InvocationID: "inv-2"}, "inv-2")
		if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeRunnerUnavailable {
			t.Errorf("kind %q: %+v, want RunnerUnavailable", kind, o)
		}
	}
	if len(proc.seen) != 1 {
		t.Errorf("process runner ran %d times, want once", len(proc.seen))
	}
	if _, err := os.Stat(filepath.Join(root, "inv-2")); !os.IsNotExist(err) {
		t.Errorf("workdir created for a refused run: %v", err)
	}
}

func TestScriptOutcomes(t *testing.T) {
	if diff := cmp.Diff(Outcome{State: wire.StateFailed, ExitCode: ptr(7),
		Error: &wire.ErrorInfo{TypeName: wire.ErrTypeScriptFailed, Message: "exit status 7"}}, ScriptExited(7)); diff != "" {
		t.Error(diff)
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("sh is needed to end a script")
	}
	exited := exec.Command("sh", "-c", "exit 3").Run()
	if diff := cmp.Diff(ScriptExited(3), ScriptFailed(exited)); diff != "" {
		t.Errorf("exit 3: %s", diff)
	}
	signalled := exec.Command("sh", "-c", "kill -KILL $$").Run()
	want := Failed(wire.ErrTypeScriptFailed, "signal: killed")
	if diff := cmp.Diff(want, ScriptFailed(signalled)); diff != "" {
		t.Errorf("killed by a signal: %s", diff)
	}
}
