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
	// FailApply, when set, makes Apply fail with it (store-failure tests).
	FailApply error
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
	if s.FailApply != nil {
		return s.FailApply
	}
	for _, c := range b.Chunks {
		if have := int64(len(s.chunks[c.ExecID])); have != c.Offset {
			return fmt.Errorf("memstore: chunk of exec %s at offset %d, log ends at %d", c.ExecID, c.Offset, have)
		}
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
