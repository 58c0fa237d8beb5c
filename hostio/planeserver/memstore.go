package planeserver

import (
	"context"
	"fmt"
	"sync"

	"github.com/nymphd/nymph/wirecore/plane"
)

// MemStore is a Store in memory: durable for the life of the process only.
// It backs tests and `nymph serve --store memory`.
type MemStore struct {
	mu          sync.Mutex
	workers     map[string]plane.WorkerRecord
	commands    map[string]plane.CommandRecord
	invocations map[string]plane.InvocationRecord
	execs       map[string]plane.ExecRecord
	chunks      map[string][]byte // exec id → the whole log so far
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{
		workers:     map[string]plane.WorkerRecord{},
		commands:    map[string]plane.CommandRecord{},
		invocations: map[string]plane.InvocationRecord{},
		execs:       map[string]plane.ExecRecord{},
		chunks:      map[string][]byte{},
	}
}

// Apply implements Store.
func (s *MemStore) Apply(_ context.Context, b plane.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	for _, c := range b.Chunks {
		s.chunks[c.ExecID] = append(s.chunks[c.ExecID], c.Data...)
	}
	for _, id := range b.DeleteCommands {
		delete(s.commands, id)
	}
	for _, id := range b.DeleteInvocations {
		delete(s.invocations, id)
	}
	for _, id := range b.DeleteExecs {
		delete(s.execs, id)
		delete(s.chunks, id)
	}
	return nil
}

// checkChunks refuses chunks that do not each start where their exec's
// log ends, counting the chunks of the same batch before them, so a
// refused batch changes nothing.
func (s *MemStore) checkChunks(chunks []plane.ChunkRecord) error {
	ends := map[string]int64{}
	for _, c := range chunks {
		end, ok := ends[c.ExecID]
		if !ok {
			end = int64(len(s.chunks[c.ExecID]))
		}
		if c.Offset != end {
			return fmt.Errorf("memstore: chunk of exec %s at offset %d, log ends at %d", c.ExecID, c.Offset, end)
		}
		ends[c.ExecID] = end + int64(len(c.Data))
	}
	return nil
}

// Load implements Store.
func (s *MemStore) Load(context.Context) (plane.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var snap plane.Snapshot
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
	return snap, nil
}

// ReadChunks implements Store.
func (s *MemStore) ReadChunks(_ context.Context, execID string, offset int64, max int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.chunks[execID]
	if offset < 0 || offset >= int64(len(log)) {
		return nil, nil
	}
	end := min(int64(len(log)), offset+int64(max))
	return append([]byte(nil), log[offset:end]...), nil
}

// Close implements Store.
func (s *MemStore) Close() error { return nil }
