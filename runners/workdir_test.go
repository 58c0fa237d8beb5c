package runners

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/hostio/idpath"
	"github.com/nymphd/nymph/wirecore/wire"
)

func ptr[T any](v T) *T { return &v }

func TestPrepareWorkdir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "udf")
	dir, err := PrepareWorkdir(root, "inv-1", []byte("args"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(root, "inv-1") {
		t.Fatalf("dir %s", dir)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("workdir mode %v, err %v", st.Mode(), err)
	}
	if st, _ := os.Stat(root); st.Mode().Perm() != 0o711 {
		t.Fatalf("root mode %v", st.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ArgsFile)); string(b) != "args" {
		t.Fatalf("args %q", b)
	}
	// A redelivered invocation reuses the directory, without the outputs
	// of the earlier attempt.
	os.WriteFile(filepath.Join(dir, ErrorFile), []byte("{}"), 0o600)
	os.WriteFile(filepath.Join(dir, ResultFile), []byte("old"), 0o600)
	if _, err := PrepareWorkdir(root, "inv-1", []byte("again"), nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ArgsFile)); string(b) != "again" {
		t.Fatalf("args %q", b)
	}
	for _, stale := range []string{ErrorFile, ResultFile} {
		if _, err := os.Stat(filepath.Join(dir, stale)); !os.IsNotExist(err) {
			t.Errorf("stale %s kept: %v", stale, err)
		}
	}
}

func TestPrepareWorkdirRefusesPaths(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"", "../x", "a/b", "/abs", "a\x00b", strings.Repeat("x", 300)} {
		if _, err := PrepareWorkdir(root, name, nil, nil); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
}

// An id the wire allows but no plain file name is (a colon, a leading
// dot) gets a workdir of its own directly under the root, named by
// idpath; a plain one is its own name (spec 003:
// {workdir}/{invocation_id}).
func TestPrepareWorkdirTakesEveryWireID(t *testing.T) {
	root := t.TempDir()
	for _, id := range []string{"01HZX", "inv:1", "job@host", "-lead", "..", "_setup-c:1"} {
		dir, err := PrepareWorkdir(root, id, []byte("a"), nil)
		if err != nil {
			t.Fatalf("id %q: %v", id, err)
		}
		want, _ := idpath.Name(id)
		if dir != filepath.Join(root, want) || id == "01HZX" && want != id {
			t.Errorf("id %q: workdir %s, want %s", id, dir, filepath.Join(root, want))
		}
	}
}

func TestChildEnv(t *testing.T) {
	run := wire.Run{InvocationID: "i1"}
	if diff := cmp.Diff([]string{"DREAMLAKE_INVOCATION_ID=i1", "DREAMLAKE_WORKDIR=/w"}, ChildEnv(run, "/w")); diff != "" {
		t.Error(diff)
	}
	run.ParentInvocationID, run.RootInvocationID = ptr("p"), ptr("r")
	want := []string{"DREAMLAKE_INVOCATION_ID=i1", "DREAMLAKE_WORKDIR=/w", "DREAMLAKE_PARENT_INVOCATION_ID=p", "DREAMLAKE_ROOT_INVOCATION_ID=r"}
	if diff := cmp.Diff(want, ChildEnv(run, "/w")); diff != "" {
		t.Error(diff)
	}
}

func TestReadOutcome(t *testing.T) {
	exit1 := errors.New("exit status 1")
	for _, tc := range []struct {
		name   string
		files  map[string]string
		exited error
		want   Outcome
	}{
		{"result", map[string]string{ResultFile: "\x81\xa1a\x01"}, nil,
			Outcome{State: wire.StateSucceeded, ResultBlob: []byte("\x81\xa1a\x01")}},
		{"empty result is still a result", map[string]string{ResultFile: ""}, nil,
			Outcome{State: wire.StateSucceeded, ResultBlob: []byte{}}},
		{"error.json", map[string]string{ErrorFile: `{"type":"ValueError","message":"bad x","traceback":"tb"}`}, exit1,
			Outcome{State: wire.StateFailed, Error: &wire.ErrorInfo{TypeName: "ValueError", Message: "ValueError: bad x", Traceback: ptr("tb")}}},
		{"error.json with exit 0", map[string]string{ErrorFile: `{"type":"KeyError","message":"k"}`}, nil,
			Outcome{State: wire.StateFailed, Error: &wire.ErrorInfo{TypeName: "KeyError", Message: "KeyError: k"}}},
		{"error.json without type", map[string]string{ErrorFile: `{"message":"m"}`}, exit1,
			Outcome{State: wire.StateFailed, Error: &wire.ErrorInfo{TypeName: wire.ErrTypeDaemon, Message: "m"}}},
		{"result but nonzero exit", map[string]string{ResultFile: "x"}, exit1,
			Failed(wire.ErrTypeDaemon, "entry program failed: exit status 1")},
		{"exit 0 nothing written", nil, nil,
			Failed(wire.ErrTypeDaemon, "entry program exited 0 without writing result.msgpack or error.json")},
		{"crash nothing written", nil, exit1,
			Failed(wire.ErrTypeDaemon, "entry program failed: exit status 1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, ReadOutcome(dir, tc.exited)); diff != "" {
				t.Error(diff)
			}
		})
	}
}

func TestReadOutcomeBadErrorJSON(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ErrorFile), []byte("{not json"), 0o600)
	o := ReadOutcome(dir, errors.New("exit status 1"))
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeDaemon {
		t.Fatalf("%+v", o)
	}
}

// fakeRunner writes what the test says into the workdir.
type fakeRunner struct {
	kind  string
	write map[string]string
	seen  []Invocation
}

func (f *fakeRunner) Kind() string { return f.kind }

func (f *fakeRunner) Run(_ context.Context, inv Invocation) Outcome {
	f.seen = append(f.seen, inv)
	for name, body := range f.write {
		os.WriteFile(filepath.Join(inv.Workdir, name), []byte(body), 0o600)
	}
	if _, ok := f.write[ResultFile]; ok {
		return ReadOutcome(inv.Workdir, nil)
	}
	return ReadOutcome(inv.Workdir, errors.New("exit status 1"))
}

// Lookup takes a kind as the daemon core resolved it: an offered kind is
// its runner, any other name is RunnerUnavailable (the core has already
// applied the default and the alias, and refused names that are no kind).
func TestLookup(t *testing.T) {
	proc := &fakeRunner{kind: KindProcess}
	dock := &fakeRunner{kind: KindDocker}
	r := NewRegistry(Config{Root: t.TempDir()}, proc, dock)
	for _, tc := range []struct {
		kind string
		want Runner
	}{
		{"process", proc},
		{"docker", dock},
		{"slurm", nil},
		{"gvisor", nil},
		{"subprocess", nil}, // an alias is the core's to resolve
	} {
		rn, info := r.Lookup(tc.kind)
		if rn != tc.want {
			t.Errorf("%q: runner %v", tc.kind, rn)
		}
		if tc.want != nil {
			if info != nil {
				t.Errorf("%q: error %+v", tc.kind, info)
			}
			continue
		}
		if want := "runner kind " + tc.kind + " is not offered by this daemon"; info == nil || info.TypeName != wire.ErrTypeRunnerUnavailable || info.Message != want {
			t.Errorf("%q: error %+v, want %s %q", tc.kind, info, wire.ErrTypeRunnerUnavailable, want)
		}
	}
}

func TestExecuteDeletesOnSuccessKeepsOnFailure(t *testing.T) {
	root := t.TempDir()
	ok := &fakeRunner{kind: KindProcess, write: map[string]string{ResultFile: "res"}}
	r := NewRegistry(Config{Root: root, Entry: []string{"entry"}}, ok)
	o := r.ExecuteAs(context.Background(), KindProcess, wire.Run{InvocationID: "good", ArgsBlob: []byte("a")}, "")
	if o.State != wire.StateSucceeded || string(o.ResultBlob) != "res" {
		t.Fatalf("%+v", o)
	}
	if _, err := os.Stat(filepath.Join(root, "good")); !os.IsNotExist(err) {
		t.Fatalf("workdir of a success not deleted: %v", err)
	}
	if got := ok.seen[0]; got.Workdir != filepath.Join(root, "good") || got.Entry[0] != "entry" {
		t.Fatalf("invocation %+v", got)
	}

	bad := &fakeRunner{kind: KindProcess, write: map[string]string{ErrorFile: `{"type":"E","message":"m"}`}}
	r = NewRegistry(Config{Root: root}, bad)
	o = r.ExecuteAs(context.Background(), KindProcess, wire.Run{InvocationID: "setup-7"}, "_setup-7")
	if o.State != wire.StateFailed || o.Error.Message != "E: m" {
		t.Fatalf("%+v", o)
	}
	if _, err := os.Stat(filepath.Join(root, "_setup-7", ErrorFile)); err != nil {
		t.Fatalf("workdir of a failure not kept: %v", err)
	}
	if got := bad.seen[0].Entry; len(got) != 3 || got[0] != "python3" {
		t.Fatalf("default entry %v", got)
	}
}

func TestExecuteUnofferedKindSpawnsNothing(t *testing.T) {
	root := t.TempDir()
	proc := &fakeRunner{kind: KindProcess}
	r := NewRegistry(Config{Root: root}, proc)
	o := r.ExecuteAs(context.Background(), KindSlurm, wire.Run{InvocationID: "x", RunConfig: wire.RunConfig{Runner: "slurm"}}, "")
	want := Outcome{State: wire.StateFailed, Error: &wire.ErrorInfo{TypeName: wire.ErrTypeRunnerUnavailable, Message: "runner kind slurm is not offered by this daemon"}}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Error(diff)
	}
	if len(proc.seen) != 0 {
		t.Error("fell back to another runner")
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("workdir created for a refused run: %v", entries)
	}
}

func TestMockOnlyWithTag(t *testing.T) {
	_, ok := Canonical(KindMock)
	if ok != mockBuilt || (len(BuildTagged()) > 0) != mockBuilt {
		t.Fatalf("mock known=%v, built=%v", ok, mockBuilt)
	}
}
