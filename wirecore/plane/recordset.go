package plane

import "fmt"

// RecordSet is every record a Store holds, with each exec's log, in
// memory: a Batch applied as the Batch doc says a Store applies one, and
// read back as a Snapshot. planeserver's MemStore is one behind a lock;
// the transcripts check a plane's batches against one.
type RecordSet struct {
	workers     map[string]WorkerRecord
	commands    map[string]CommandRecord
	invocations map[string]InvocationRecord
	execs       map[string]ExecRecord
	tokens      map[string]TokenRecord
	logs        map[string][]byte // exec id → the whole log so far
}

// NewRecordSet returns an empty RecordSet.
func NewRecordSet() *RecordSet {
	return &RecordSet{
		workers:     map[string]WorkerRecord{},
		commands:    map[string]CommandRecord{},
		invocations: map[string]InvocationRecord{},
		execs:       map[string]ExecRecord{},
		tokens:      map[string]TokenRecord{},
		logs:        map[string][]byte{},
	}
}

// Apply applies b: the upserts, then the deletes. A batch holding a chunk
// that does not start where its exec's log ends is refused whole, with
// nothing changed.
func (s *RecordSet) Apply(b *Batch) error {
	if err := s.checkChunks(b.Chunks); err != nil {
		return err
	}
	for _, w := range b.Workers {
		s.workers[w.ID] = w
	}
	for _, c := range b.Commands {
		s.commands[c.ID] = c
	}
	for _, r := range b.Invocations {
		s.invocations[r.ID] = r
	}
	for _, e := range b.Execs {
		s.execs[e.ExecID] = e
	}
	for _, t := range b.Tokens {
		s.tokens[t.ID] = t
	}
	for _, c := range b.Chunks {
		s.logs[c.ExecID] = append(s.logs[c.ExecID], c.Data...)
	}
	for _, id := range b.DeleteCommands {
		delete(s.commands, id)
	}
	for _, id := range b.DeleteInvocations {
		delete(s.invocations, id)
	}
	for _, id := range b.DeleteExecs {
		delete(s.execs, id)
		delete(s.logs, id)
	}
	for _, id := range b.DeleteWorkers {
		delete(s.workers, id)
	}
	return nil
}

// checkChunks refuses chunks that do not each start where their exec's
// log ends, counting the chunks of the same batch before them (a batch
// may hold two chunks of one exec).
func (s *RecordSet) checkChunks(chunks []ChunkRecord) error {
	ends := map[string]int64{}
	for _, c := range chunks {
		end, ok := ends[c.ExecID]
		if !ok {
			end = int64(len(s.logs[c.ExecID]))
		}
		if c.Offset != end {
			return fmt.Errorf("chunk of exec %s at offset %d, log ends at %d", c.ExecID, c.Offset, end)
		}
		ends[c.ExecID] = end + int64(len(c.Data))
	}
	return nil
}

// Snapshot is every record in s; each slice is in no particular order.
func (s *RecordSet) Snapshot() Snapshot {
	var snap Snapshot
	for _, w := range s.workers {
		snap.Workers = append(snap.Workers, w)
	}
	for _, c := range s.commands {
		snap.Commands = append(snap.Commands, c)
	}
	for _, r := range s.invocations {
		snap.Invocations = append(snap.Invocations, r)
	}
	for _, e := range s.execs {
		snap.Execs = append(snap.Execs, e)
	}
	for _, t := range s.tokens {
		snap.Tokens = append(snap.Tokens, t)
	}
	return snap
}

// Log is the log of exec id stored so far; the caller must not change it.
func (s *RecordSet) Log(id string) []byte { return s.logs[id] }
