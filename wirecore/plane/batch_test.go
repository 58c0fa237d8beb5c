package plane_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nymphd/nymph/wirecore/plane"
)

// A merge of several steps' batches keeps one entry per record, the
// latest, where the record first appeared; chunks and deletes add up.
func TestBatchMergerKeepsOneEntryPerRecord(t *testing.T) {
	var m plane.BatchMerger
	for range 2 { // the second round runs after a Reset
		m.Reset()
		m.Merge(&plane.Batch{
			Workers:  []plane.WorkerRecord{{ID: "w1", State: plane.WorkerActive}},
			Commands: []plane.CommandRecord{{ID: "c1", Kind: "exec"}},
			Execs:    []plane.ExecRecord{{ExecID: "x1", State: plane.ExecQueued}},
			Chunks:   []plane.ChunkRecord{{ExecID: "x1", Offset: 0, Data: []byte("a")}},
		})
		m.Merge(&plane.Batch{
			Workers:        []plane.WorkerRecord{{ID: "w2", State: plane.WorkerActive}, {ID: "w1", State: plane.WorkerLost}},
			DeleteCommands: []string{"c1"},
			Execs:          []plane.ExecRecord{{ExecID: "x1", State: plane.ExecFinished, LogSize: 1}},
			Chunks:         []plane.ChunkRecord{{ExecID: "x1", Offset: 1, Data: []byte("b")}},
			DeleteExecs:    []string{"x0"},
		})
		want := plane.Batch{
			Workers:        []plane.WorkerRecord{{ID: "w1", State: plane.WorkerLost}, {ID: "w2", State: plane.WorkerActive}},
			Commands:       []plane.CommandRecord{{ID: "c1", Kind: "exec"}},
			DeleteCommands: []string{"c1"},
			Execs:          []plane.ExecRecord{{ExecID: "x1", State: plane.ExecFinished, LogSize: 1}},
			Chunks:         []plane.ChunkRecord{{ExecID: "x1", Offset: 0, Data: []byte("a")}, {ExecID: "x1", Offset: 1, Data: []byte("b")}},
			DeleteExecs:    []string{"x0"},
		}
		if d := cmp.Diff(want, m.Batch(), cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("merged batch (-want +got):\n%s", d)
		}
	}
	m.Reset()
	if !m.Empty() {
		t.Fatalf("after Reset: %+v", m.Batch())
	}
}
