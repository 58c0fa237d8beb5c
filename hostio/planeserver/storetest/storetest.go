// Package storetest is the behaviour every planeserver.Store must have,
// as one table a store's tests run (Run): what a batch does to the
// records, what a refused batch leaves, how log bytes read back, and what
// a reader beside a writer sees. planeserver's MemStore and
// hostio/sqlstore run it; a new store runs it too.
//
// It decides nothing about durability across a crash or a reopen, which
// only a store that outlives its process can show: those tests stay with
// the store.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Run runs every behaviour, each against a fresh, empty store from open.
func Run(t *testing.T, open func(t *testing.T) planeserver.Store) {
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) { b.check(t, open(t)) })
	}
}

var behaviours = []struct {
	name  string
	check func(t *testing.T, s planeserver.Store)
}{
	{"an empty store loads nothing and takes an empty batch", emptyStore},
	{"a batch loads back as it was applied", roundTrip},
	{"an upsert replaces the record of its id", upsertReplaces},
	{"deletes apply after the upserts of their batch", deletesAfterUpserts},
	{"a forgotten exec leaves with its log, a forgotten invocation leaves", forgetRecords},
	{"a forgotten worker leaves, after an upsert of it in the same batch", forgetWorker},
	{"a log reads back from any offset, up to max bytes", readChunks},
	{"a chunk that leaves a gap or overlaps refuses its whole batch", chunkGapRefusesBatch},
	{"chunk bytes are the store's once Apply returned", chunkBytesCopied},
	{"a reader beside a writer sees whole batches", readerBesideWriter},
}

// T0 is the time of SampleBatch's records.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)

func str(s string) *string { return &s }

// SampleBatch holds a record of every kind with its fields set, and two
// chunks of exec e1's log ("hello world").
func SampleBatch() plane.Batch {
	res := &wire.ExecResult{ExitCode: 3, Stdout: "out", Stderr: "err", DurationMS: 12, Error: str("stdout truncated")}
	return plane.Batch{
		Workers: []plane.WorkerRecord{{
			ID: "w1", MachineID: "m1", Label: "laptop", Tags: []string{"host=local"},
			Queues:       []string{"gpu*"},
			Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4, Workdir: "/tmp/w"},
			Versions:     wire.Versions{Daemon: str("0.1.0"), Protocol: str("1")},
			State:        plane.WorkerSettingUp, CreatedAt: T0, LastSeen: T0.Add(time.Second),
			SetupsInFlight: []plane.SetupInFlight{{CommandID: "c0", Refresh: true}},
			PublicKey:      str("nXxuYdMdZJ8ReLGE5FhHyNfcjCzCVEM7PWSBmnwbK7M"), KeyID: "ed25519-00112233445566778899aabbccddeeff",
			PrevKeyID: "ed25519-ffeeddccbbaa99887766554433221100", PrevPublicKey: "k0", RotatedAt: T0.Add(time.Second),
			RevokedKeyIDs: []string{"ed25519-0123456789abcdef0123456789abcdef"},
			TokenID:       "t1", PinnedQueue: "gpu", PinnedTags: []string{"site=lab"},
		}},
		Tokens: []plane.TokenRecord{{
			ID: "t1", SecretHash: "6a09e667f3bcc908b2fb1366ea957d3e3adec17512775099da2f590b0667322a", Queue: "gpu",
			Tags: []string{"site=lab"}, CreatedAt: T0, ExpiresAt: T0.Add(15 * time.Minute),
			RedeemedAt: T0.Add(time.Minute), WorkerID: "w1", Failures: 2,
		}},
		Commands: []plane.CommandRecord{
			{ID: "c2", WorkerID: "w1", Seq: 2, Kind: "exec", Body: []byte{0x80}, CreatedAt: T0, ExecID: "e1"},
			{ID: "c1", WorkerID: "w1", Seq: 1, Kind: "setup", Body: []byte{0x81, 0xa1, 'a', 1}, CreatedAt: T0, Refresh: true},
		},
		Invocations: []plane.InvocationRecord{{
			ID: "i1", Seq: 3, Queue: "default", Function: wire.Function{Module: "m", Qualname: "f"},
			RunConfig: wire.RunConfig{Runner: "process"}, ArgsBlob: []byte{1, 2, 3},
			State: plane.InvocationFailed, WorkerID: "w1",
			Error:     &wire.ErrorInfo{TypeName: "WorkerLost", Message: "gone"},
			CreatedAt: T0, StartedAt: T0.Add(time.Second), FinishedAt: T0.Add(2 * time.Second),
		}},
		Execs: []plane.ExecRecord{{
			ExecID: "e1", CommandID: "c2", WorkerID: "w1", State: plane.ExecFinished, Stream: true,
			Result: res, LogSize: 11, CreatedAt: T0, DeliveredAt: T0, FinishedAt: T0.Add(time.Second),
		}},
		Chunks: []plane.ChunkRecord{
			{ExecID: "e1", Offset: 0, Data: []byte("hello "), At: T0},
			{ExecID: "e1", Offset: 6, Data: []byte("world"), At: T0},
		},
	}
}

// snapshotOpts compare snapshots as sets of records, times by instant,
// and ignore an exec result's raw msgpack fields, which a store keeping
// JSON does not carry (they are always null on the exec path).
var snapshotOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
	cmpopts.IgnoreFields(wire.ExecResult{}, "ResultInline", "ResultRef"),
	cmpopts.SortSlices(func(a, b plane.WorkerRecord) bool { return a.ID < b.ID }),
	cmpopts.SortSlices(func(a, b plane.CommandRecord) bool { return a.ID < b.ID }),
	cmpopts.SortSlices(func(a, b plane.InvocationRecord) bool { return a.ID < b.ID }),
	cmpopts.SortSlices(func(a, b plane.ExecRecord) bool { return a.ExecID < b.ExecID }),
	cmpopts.SortSlices(func(a, b plane.TokenRecord) bool { return a.ID < b.ID }),
}

func apply(t *testing.T, s planeserver.Store, b plane.Batch) {
	t.Helper()
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func load(t *testing.T, s planeserver.Store) plane.Snapshot {
	t.Helper()
	snap, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return snap
}

func readAll(t *testing.T, s planeserver.Store, execID string) string {
	t.Helper()
	data, err := s.ReadChunks(context.Background(), execID, 0, 1<<20)
	if err != nil {
		t.Fatalf("read the log of %s: %v", execID, err)
	}
	return string(data)
}

func emptyStore(t *testing.T, s planeserver.Store) {
	if snap := load(t, s); len(snap.Workers)+len(snap.Commands)+len(snap.Invocations)+len(snap.Execs)+len(snap.Tokens) != 0 {
		t.Fatalf("fresh store not empty: %+v", snap)
	}
	apply(t, s, plane.Batch{})
	if got := readAll(t, s, "e1"); got != "" {
		t.Fatalf("log of an unknown exec: %q", got)
	}
}

func roundTrip(t *testing.T, s planeserver.Store) {
	b := SampleBatch()
	apply(t, s, b)
	want := plane.Snapshot{Workers: b.Workers, Commands: b.Commands, Invocations: b.Invocations, Execs: b.Execs, Tokens: b.Tokens}
	if d := cmp.Diff(want, load(t, s), snapshotOpts); d != "" {
		t.Fatalf("snapshot (-want +got):\n%s", d)
	}
	if got := readAll(t, s, "e1"); got != "hello world" {
		t.Fatalf("log of e1: %q, want hello world", got)
	}
}

func upsertReplaces(t *testing.T, s planeserver.Store) {
	b := SampleBatch()
	apply(t, s, b)
	w := b.Workers[0]
	w.State = plane.WorkerActive
	inv := b.Invocations[0]
	inv.State, inv.Error = plane.InvocationSucceeded, nil
	tok := b.Tokens[0]
	tok.Failures, tok.BurnedAt = 5, T0.Add(2*time.Minute)
	apply(t, s, plane.Batch{Workers: []plane.WorkerRecord{w}, Invocations: []plane.InvocationRecord{inv}, Tokens: []plane.TokenRecord{tok}})
	want := plane.Snapshot{Workers: []plane.WorkerRecord{w}, Commands: b.Commands, Invocations: []plane.InvocationRecord{inv}, Execs: b.Execs,
		Tokens: []plane.TokenRecord{tok}}
	if d := cmp.Diff(want, load(t, s), snapshotOpts); d != "" {
		t.Fatalf("snapshot after the upserts (-want +got):\n%s", d)
	}
}

func deletesAfterUpserts(t *testing.T, s planeserver.Store) {
	b := SampleBatch()
	apply(t, s, b)
	c3 := plane.CommandRecord{ID: "c3", WorkerID: "w1", Seq: 4, Kind: "reset_backoff", CreatedAt: T0}
	apply(t, s, plane.Batch{Commands: []plane.CommandRecord{c3}, DeleteCommands: []string{"c1", "c3", "never-stored"}})
	if got := load(t, s).Commands; len(got) != 1 || got[0].ID != "c2" {
		t.Fatalf("commands after the deletes: %+v, want only c2", got)
	}
}

func forgetRecords(t *testing.T, s planeserver.Store) {
	b := SampleBatch()
	apply(t, s, b)
	apply(t, s, plane.Batch{DeleteInvocations: []string{"i1"}, DeleteExecs: []string{"e1"}})
	snap := load(t, s)
	if len(snap.Invocations) != 0 || len(snap.Execs) != 0 {
		t.Fatalf("after forgetting i1 and e1: invocations %+v, execs %+v", snap.Invocations, snap.Execs)
	}
	if got := readAll(t, s, "e1"); got != "" {
		t.Fatalf("log of the forgotten e1: %q", got)
	}
	if len(snap.Workers) != 1 || len(snap.Commands) != 2 {
		t.Fatalf("forgetting took more: %+v", snap)
	}
}

func forgetWorker(t *testing.T, s planeserver.Store) {
	b := SampleBatch()
	apply(t, s, b)
	w := b.Workers[0]
	w.State = plane.WorkerLost
	ids := make([]string, 0, len(b.Commands))
	for _, c := range b.Commands {
		ids = append(ids, c.ID)
	}
	apply(t, s, plane.Batch{Workers: []plane.WorkerRecord{w}, DeleteCommands: ids, DeleteWorkers: []string{w.ID, "never-stored"}})
	snap := load(t, s)
	if len(snap.Workers) != 0 || len(snap.Commands) != 0 {
		t.Fatalf("after forgetting %s: workers %+v, commands %+v", w.ID, snap.Workers, snap.Commands)
	}
	if len(snap.Invocations) != len(b.Invocations) || len(snap.Execs) != len(b.Execs) {
		t.Fatalf("forgetting a worker took its history: %+v", snap)
	}
}

func readChunks(t *testing.T, s planeserver.Store) {
	apply(t, s, SampleBatch())
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
		got, err := s.ReadChunks(context.Background(), "e1", tc.from, tc.max)
		if err != nil {
			t.Fatalf("ReadChunks(%d, %d): %v", tc.from, tc.max, err)
		}
		if string(got) != tc.want {
			t.Errorf("ReadChunks(%d, %d) = %q, want %q", tc.from, tc.max, got, tc.want)
		}
	}
}

func chunkGapRefusesBatch(t *testing.T, s planeserver.Store) {
	apply(t, s, SampleBatch())
	bang := plane.ChunkRecord{ExecID: "e1", Offset: 11, Data: []byte("!")}
	for _, c := range []struct {
		name   string
		chunks []plane.ChunkRecord
	}{
		{"an overlap", []plane.ChunkRecord{{ExecID: "e1", Offset: 6, Data: []byte("again")}}},
		{"a gap", []plane.ChunkRecord{{ExecID: "e1", Offset: 12, Data: []byte("x")}}},
		{"a first chunk past offset 0", []plane.ChunkRecord{{ExecID: "new", Offset: 1, Data: []byte("x")}}},
		{"two chunks at one offset", []plane.ChunkRecord{bang, bang}},
	} {
		// A redemption with the key it enrolled, as one hello's batch.
		b := plane.Batch{Workers: []plane.WorkerRecord{{ID: "w2", State: plane.WorkerActive, KeyID: "ed25519-22222222222222222222222222222222"}},
			Tokens: []plane.TokenRecord{{ID: "t2", SecretHash: "h2", RedeemedAt: T0, WorkerID: "w2"}}, Chunks: c.chunks}
		if err := s.Apply(context.Background(), b); err == nil {
			t.Errorf("%s accepted", c.name)
		}
	}
	if snap := load(t, s); len(snap.Workers) != 1 || len(snap.Tokens) != 1 {
		t.Errorf("a refused batch left %d workers and %d tokens, want 1 and 1: a batch applies whole or not at all", len(snap.Workers), len(snap.Tokens))
	}
	if got := readAll(t, s, "e1"); got != "hello world" {
		t.Errorf("log of e1 after refused chunks: %q", got)
	}
}

func chunkBytesCopied(t *testing.T, s planeserver.Store) {
	body := []byte("first")
	apply(t, s, plane.Batch{Chunks: []plane.ChunkRecord{{ExecID: "e", Offset: 0, Data: body, At: T0}}})
	copy(body, "XXXXX") // the request body, reused by the server
	if got := readAll(t, s, "e"); got != "first" {
		t.Fatalf("log after its request body was reused: %q", got)
	}
	read, err := s.ReadChunks(context.Background(), "e", 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	copy(read, "YYYYY") // the reader's to keep
	if got := readAll(t, s, "e"); got != "first" {
		t.Fatalf("log after a reader changed what it read: %q", got)
	}
}

// readerBesideWriter applies batches of one invocation and one log byte
// each while two readers load and read: each must see a prefix of the
// batches, never fewer than it saw before, never a gap.
func readerBesideWriter(t *testing.T, s planeserver.Store) {
	ctx := context.Background()
	const n = 30
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	written := make(chan struct{})
	wg.Go(func() {
		defer close(written)
		for i := range n {
			err := s.Apply(ctx, plane.Batch{
				Invocations: []plane.InvocationRecord{{ID: fmt.Sprintf("i%04d", i), Seq: uint64(i), State: plane.InvocationQueued, CreatedAt: T0}},
				Chunks:      []plane.ChunkRecord{{ExecID: "e", Offset: int64(i), Data: []byte{'a' + byte(i%26)}}},
			})
			if err != nil {
				errs <- err
				return
			}
		}
	})
	for range 2 {
		wg.Go(func() {
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
				if len(snap.Invocations) < last {
					errs <- fmt.Errorf("reader went back from %d invocations to %d", last, len(snap.Invocations))
					return
				}
				seen := map[string]bool{}
				for _, inv := range snap.Invocations {
					seen[inv.ID] = true
				}
				for i := range len(snap.Invocations) {
					if !seen[fmt.Sprintf("i%04d", i)] {
						errs <- fmt.Errorf("reader saw %d invocations without i%04d", len(snap.Invocations), i)
						return
					}
				}
				data, err := s.ReadChunks(ctx, "e", 0, len(snap.Invocations))
				if err != nil {
					errs <- err
					return
				}
				if len(data) != len(snap.Invocations) {
					errs <- fmt.Errorf("reader saw %d invocations but %d log bytes", len(snap.Invocations), len(data))
					return
				}
				last = len(snap.Invocations)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if snap := load(t, s); len(snap.Invocations) != n {
		t.Fatalf("after the writer: %d invocations, want %d", len(snap.Invocations), n)
	}
	if got := readAll(t, s, "e"); got != logOf(n) {
		t.Fatalf("log after the writer: %q, want %q", got, logOf(n))
	}
}

// logOf is the log readerBesideWriter's n batches write.
func logOf(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return string(b)
}
