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
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func str(s string) *string { return &s }

func sampleBatch() plane.Batch {
	res := &wire.ExecResult{ExitCode: 3, Stdout: "out", Stderr: "err", DurationMS: 12, Error: str("stdout truncated")}
	return plane.Batch{
		Workers: []plane.WorkerRecord{{
			ID: "w1", MachineID: "m1", Label: "laptop", Tags: []string{"host=local"},
			Queues:       []string{"gpu*"},
			Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4, Workdir: "/tmp/w"},
			Versions:     wire.Versions{Daemon: str("0.1.0"), Protocol: str("1")},
			State:        plane.WorkerSettingUp, CreatedAt: t0, LastSeen: t0.Add(time.Second),
			SetupsInFlight: []plane.SetupInFlight{{CommandID: "c0", Refresh: true}},
		}},
		Commands: []plane.CommandRecord{
			{ID: "c2", WorkerID: "w1", Seq: 2, Kind: "exec", Body: []byte{0x80}, CreatedAt: t0, ExecID: "e1"},
			{ID: "c1", WorkerID: "w1", Seq: 1, Kind: "setup", Body: []byte{0x81, 0xa1, 'a', 1}, CreatedAt: t0, Refresh: true},
		},
		Invocations: []plane.InvocationRecord{{
			ID: "i1", Seq: 3, Queue: "default", Function: wire.Function{Module: "m", Qualname: "f"},
			RunConfig: wire.RunConfig{Runner: "process"}, ArgsBlob: []byte{1, 2, 3},
			State: plane.InvocationFailed, WorkerID: "w1",
			Error:     &wire.ErrorInfo{TypeName: "WorkerLost", Message: "gone"},
			CreatedAt: t0, StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(2 * time.Second),
		}},
		Execs: []plane.ExecRecord{{
			ExecID: "e1", CommandID: "c2", WorkerID: "w1", State: plane.ExecFinished, Stream: true,
			Result: res, LogSize: 11, CreatedAt: t0, DeliveredAt: t0, FinishedAt: t0.Add(time.Second),
		}},
		Chunks: []plane.ChunkRecord{
			{ExecID: "e1", Offset: 0, Data: []byte("hello "), At: t0},
			{ExecID: "e1", Offset: 6, Data: []byte("world"), At: t0},
		},
	}
}

// snapOpts compares times by instant and ignores raw msgpack fields that
// JSON does not carry (they are always null on the exec path).
var snapOpts = []cmp.Option{
	cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
	cmp.FilterPath(func(p cmp.Path) bool {
		s := p.String()
		return s == "Execs.Result.ResultInline" || s == "Execs.Result.ResultRef"
	}, cmp.Ignore()),
}

func TestApplyLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	b := sampleBatch()
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := plane.Snapshot{
		Workers:     b.Workers,
		Commands:    []plane.CommandRecord{b.Commands[1], b.Commands[0]}, // oldest first
		Invocations: b.Invocations,
		Execs:       b.Execs,
	}
	if d := cmp.Diff(want, got, snapOpts...); d != "" {
		t.Fatalf("snapshot (-want +got):\n%s", d)
	}

	// Updates replace, deletions apply after upserts of the same batch.
	w := b.Workers[0]
	w.State = plane.WorkerActive
	c3 := plane.CommandRecord{ID: "c3", WorkerID: "w1", Seq: 4, Kind: "reset_backoff", CreatedAt: t0}
	if err := s.Apply(ctx, plane.Batch{
		Workers:        []plane.WorkerRecord{w},
		Commands:       []plane.CommandRecord{c3},
		DeleteCommands: []string{"c1", "c3"},
	}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Workers[0].State != plane.WorkerActive {
		t.Errorf("worker state = %q, want active", got.Workers[0].State)
	}
	if len(got.Commands) != 1 || got.Commands[0].ID != "c2" {
		t.Errorf("commands after delete = %+v, want only c2", got.Commands)
	}
}

func TestEmptyStoreLoads(t *testing.T) {
	s := open(t, t.TempDir())
	got, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Workers)+len(got.Commands)+len(got.Invocations)+len(got.Execs) != 0 {
		t.Fatalf("fresh store not empty: %+v", got)
	}
	if err := s.Apply(context.Background(), plane.Batch{}); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestReadLogs(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if err := s.Apply(ctx, sampleBatch()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from int64
		max  int
		want string
	}{
		{0, 11, "hello world"},
		{0, 100, "hello world"},
		{3, 5, "lo wo"},
		{6, 5, "world"},
		{5, 1, " "},
		{11, 9, ""},
		{5, 0, ""},
		{-1, 4, ""},
	} {
		got, err := s.ReadChunks(ctx, "e1", tc.from, tc.max)
		if err != nil {
			t.Fatalf("ReadChunks(%d,%d): %v", tc.from, tc.max, err)
		}
		if string(got) != tc.want {
			t.Errorf("ReadChunks(%d,%d) = %q, want %q", tc.from, tc.max, got, tc.want)
		}
	}
	if got, _ := s.ReadChunks(ctx, "nope", 0, 10); len(got) != 0 {
		t.Errorf("unknown exec logs = %q", got)
	}
}

func TestChunkGapOrOverlapRejectsWholeBatch(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if err := s.Apply(ctx, sampleBatch()); err != nil {
		t.Fatal(err)
	}
	err := s.Apply(ctx, plane.Batch{
		Workers: []plane.WorkerRecord{{ID: "w2", State: plane.WorkerActive}},
		Chunks:  []plane.ChunkRecord{{ExecID: "e1", Offset: 6, Data: []byte("again")}},
	})
	if err == nil {
		t.Fatal("overlapping chunk accepted")
	}
	if err := s.Apply(ctx, plane.Batch{Chunks: []plane.ChunkRecord{{ExecID: "e1", Offset: 12, Data: []byte("x")}}}); err == nil {
		t.Fatal("chunk after a gap accepted")
	}
	if err := s.Apply(ctx, plane.Batch{Chunks: []plane.ChunkRecord{{ExecID: "new", Offset: 1, Data: []byte("x")}}}); err == nil {
		t.Fatal("first chunk not at offset 0 accepted")
	}
	snap, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Workers) != 1 {
		t.Fatalf("a failed batch left %d workers, want 1 (atomic apply)", len(snap.Workers))
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
	if err := s.Apply(ctx, sampleBatch()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := open(t, dir)
	snap, err := s2.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
	snap, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
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

func TestConcurrentReadersWithWriter(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	const n = 30
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	written := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(written)
		for i := range n {
			err := s.Apply(ctx, plane.Batch{
				Invocations: []plane.InvocationRecord{{ID: fmt.Sprintf("i%04d", i), Seq: uint64(i), State: plane.InvocationQueued, CreatedAt: t0}},
				Chunks:      []plane.ChunkRecord{{ExecID: "e", Offset: int64(i), Data: []byte{'a' + byte(i%26)}}},
			})
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := 0
			for {
				select {
				case <-written:
					return
				default:
				}
				snap, err := s.Load(ctx)
				if err != nil {
					errs <- err
					return
				}
				// A reader sees a prefix: never fewer than before, never a gap.
				if len(snap.Invocations) < last {
					errs <- fmt.Errorf("reader went back from %d to %d", last, len(snap.Invocations))
					return
				}
				for i, inv := range snap.Invocations {
					if inv.ID != fmt.Sprintf("i%04d", i) {
						errs <- fmt.Errorf("reader saw %s at %d", inv.ID, i)
						return
					}
				}
				if _, err := s.ReadChunks(ctx, "e", 0, len(snap.Invocations)); err != nil {
					errs <- err
					return
				}
				last = len(snap.Invocations)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	snap, err := s.Load(ctx)
	if err != nil || len(snap.Invocations) != n {
		t.Fatalf("after the writer: %d invocations, %v; want %d", len(snap.Invocations), err, n)
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

// The store is what planeserver needs.
var _ planeserver.Store = (*Store)(nil)

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
	w := sampleBatch().Workers[0]
	chunk := bytes.Repeat([]byte("x"), 512)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("c%09d", i)
		err := s.Apply(ctx, plane.Batch{
			Workers:  []plane.WorkerRecord{w},
			Commands: []plane.CommandRecord{{ID: id, WorkerID: w.ID, Seq: uint64(i), Kind: "exec", Body: chunk[:64], CreatedAt: t0, ExecID: id}},
			Execs:    []plane.ExecRecord{{ExecID: id, CommandID: id, WorkerID: w.ID, State: plane.ExecQueued, CreatedAt: t0}},
			Chunks:   []plane.ChunkRecord{{ExecID: "bench", Offset: int64(i * len(chunk)), Data: chunk, At: t0}},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// Forgotten invocations and execs leave the store, an exec's log with it.
func TestDeleteForgottenRecords(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	b := sampleBatch()
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, plane.Batch{DeleteInvocations: []string{b.Invocations[0].ID}, DeleteExecs: []string{"e1"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range got.Invocations {
		if inv.ID == b.Invocations[0].ID {
			t.Errorf("invocation %s still stored", inv.ID)
		}
	}
	for _, e := range got.Execs {
		if e.ExecID == "e1" {
			t.Error("exec e1 still stored")
		}
	}
	if data, err := s.ReadChunks(ctx, "e1", 0, 1<<20); err != nil || len(data) != 0 {
		t.Errorf("log of e1 after delete = %q, %v; want nothing", data, err)
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
		State:     plane.InvocationQueued, CreatedAt: t0}
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

	s := open(t, dir)
	snap, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
