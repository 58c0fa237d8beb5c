package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/hostio/planeserver/storetest"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// load is everything s holds.
func load(t *testing.T, s *Store) plane.Snapshot {
	t.Helper()
	snap, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestStore holds the store to what every planeserver.Store must do.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) planeserver.Store { return open(t, t.TempDir()) })
}

// Load hands commands and invocations back oldest first, whatever order
// their batch had.
func TestLoadIsOldestFirst(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	b := storetest.SampleBatch() // c2 (seq 2) before c1 (seq 1)
	b.Invocations = append([]plane.InvocationRecord{{ID: "i0", Seq: 9, State: plane.InvocationQueued}}, b.Invocations...)
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	snap := load(t, s)
	var got []string
	for _, c := range snap.Commands {
		got = append(got, c.ID)
	}
	for _, inv := range snap.Invocations {
		got = append(got, inv.ID)
	}
	if fmt.Sprint(got) != "[c1 c2 i1 i0]" {
		t.Fatalf("loaded %v, want [c1 c2 i1 i0]: commands, then invocations, each by seq", got)
	}
}

func TestPragmas(t *testing.T) {
	s := open(t, t.TempDir())
	var mode string
	var sync int
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("db mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestReopenKeepsSchemaAndData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, storetest.SampleBatch()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	snap := load(t, open(t, dir))
	if len(snap.Workers) != 1 || len(snap.Commands) != 2 || len(snap.Execs) != 1 {
		t.Fatalf("after reopen: %+v", snap)
	}
}

// TestCrashLosesNothingApplied runs a child process that applies batches
// and is SIGKILLed after it reported some as applied; every reported batch
// must be in the database the parent then opens.
func TestCrashLosesNothingApplied(t *testing.T) {
	if os.Getenv("SQLSTORE_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashLosesNothingApplied$")
	cmd.Env = append(os.Environ(), "SQLSTORE_CRASH_CHILD="+dir)
	var out bytes.Buffer
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read acknowledgements until 50 batches are reported, then kill -9
	// while the child keeps writing.
	acked := 0
	buf := make([]byte, 1)
	var line []byte
	for acked < 50 {
		if _, err := stdout.Read(buf); err != nil {
			t.Fatalf("child ended early after %d acks: %v\n%s", acked, err, out.String())
		}
		if buf[0] == '\n' {
			acked++
			line = line[:0]
			continue
		}
		line = append(line, buf[0])
	}
	cmd.Process.Kill()
	cmd.Wait()

	s := open(t, dir)
	snap := load(t, s)
	if len(snap.Commands) < acked {
		t.Fatalf("after kill -9: %d commands stored, %d were acknowledged", len(snap.Commands), acked)
	}
	for i, c := range snap.Commands[:acked] {
		if c.ID != fmt.Sprintf("c%06d", i) {
			t.Fatalf("command %d = %s: acknowledged commands missing", i, c.ID)
		}
	}
	logs, err := s.ReadChunks(context.Background(), "e", 0, acked)
	if err != nil || len(logs) != acked {
		t.Fatalf("chunks after kill -9: %d bytes (%v), want %d", len(logs), err, acked)
	}
}

func crashChild() {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv("SQLSTORE_CRASH_CHILD"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 0; ; i++ {
		b := plane.Batch{
			Commands: []plane.CommandRecord{{ID: fmt.Sprintf("c%06d", i), WorkerID: "w", Seq: uint64(i), Kind: "exec"}},
			Chunks:   []plane.ChunkRecord{{ExecID: "e", Offset: int64(i), Data: []byte{'x'}}},
		}
		if err := s.Apply(ctx, b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(i) // acknowledged only after Apply returned
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(context.Background(), dir, nil); err == nil {
		t.Fatal("opened a database with a newer schema")
	}
}

// BenchmarkApply measures one durable batch the size of a busy poll step:
// a worker touch, a command queued, an exec record and a log chunk. Each
// iteration is a committed, fsynced transaction; its peer is MemStore, the
// same batch with no durability at all.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchApply(b, s)
}

func BenchmarkApplyMemStore(b *testing.B) {
	benchApply(b, planeserver.NewMemStore())
}

func benchApply(b *testing.B, s planeserver.Store) {
	ctx := context.Background()
	w := storetest.SampleBatch().Workers[0]
	chunk := bytes.Repeat([]byte("x"), 512)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("c%09d", i)
		err := s.Apply(ctx, plane.Batch{
			Workers:  []plane.WorkerRecord{w},
			Commands: []plane.CommandRecord{{ID: id, WorkerID: w.ID, Seq: uint64(i), Kind: "exec", Body: chunk[:64], CreatedAt: storetest.T0, ExecID: id}},
			Execs:    []plane.ExecRecord{{ExecID: id, CommandID: id, WorkerID: w.ID, State: plane.ExecQueued, CreatedAt: storetest.T0}},
			Chunks:   []plane.ChunkRecord{{ExecID: "bench", Offset: int64(i * len(chunk)), Data: chunk, At: storetest.T0}},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// A database of schema version 1 kept run_config under Go field names;
// migration 2 renames the ones encoding/json would no longer match, and
// leaves a current doc as it is.
func TestVersion1RunConfigKeysSurvive(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	db, err := sql.Open("sqlite", dsn(path, "immediate"))
	if err != nil {
		t.Fatal(err)
	}
	legacy := `{"id":"i-old","seq":1,"queue":"default","function":{"module":"m","qualname":"f"},
		"run_config":{"Runner":"slurm","Image":"img",
			"Docker":{"Network":"host","Env":null,"Volumes":null,"Args":null,
				"RegistryAuth":{"Server":"reg","Username":"u","Password":"","PasswordEnv":"REG_PW"}},
			"Slurm":{"Partition":"gpu","Time":"","Gres":"","Nodes":"","NtasksPerNode":"4","CPUsPerTask":"8","Mem":"","PollIntervalS":0.5},
			"Kube":{"Namespace":"ns","PollIntervalS":2}},
		"state":"queued","created_at":"2026-01-02T03:04:05Z"}`
	current := plane.InvocationRecord{ID: "i-new", Seq: 2, Queue: "default", Function: wire.Function{Module: "m", Qualname: "g"},
		RunConfig: wire.RunConfig{Runner: "slurm", Slurm: &wire.SlurmConfig{NtasksPerNode: "2"}},
		State:     plane.InvocationQueued, CreatedAt: storetest.T0}
	currentDoc, err := json.Marshal(current)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, migrations[0]+`
		INSERT INTO invocations (id, seq, state, doc) VALUES ('i-old', 1, 'queued', CAST(? AS BLOB)), ('i-new', 2, 'queued', ?);
		PRAGMA user_version = 1;`, legacy, currentDoc)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	snap := load(t, open(t, dir))
	got := map[string]wire.RunConfig{}
	for _, inv := range snap.Invocations {
		got[inv.ID] = inv.RunConfig
	}
	half, two := wire.Number(0.5), wire.Number(2)
	want := map[string]wire.RunConfig{
		"i-old": {Runner: "slurm", Image: "img",
			Docker: &wire.DockerConfig{Network: "host",
				RegistryAuth: &wire.RegistryAuth{Server: "reg", Username: "u", PasswordEnv: "REG_PW"}},
			Slurm: &wire.SlurmConfig{Partition: "gpu", NtasksPerNode: "4", CPUsPerTask: "8", PollIntervalS: &half},
			Kube:  &wire.KubeConfig{Namespace: "ns", PollIntervalS: &two}},
		"i-new": current.RunConfig,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run configs after migration (-want +got):\n%s", diff)
	}
}
