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
	mu      sync.Mutex
	records *plane.RecordSet
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{records: plane.NewRecordSet()} }

// Apply implements Store.
func (s *MemStore) Apply(_ context.Context, b plane.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.records.Apply(&b); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	return nil
}

// Load implements Store.
func (s *MemStore) Load(context.Context) (plane.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records.Snapshot(), nil
}

// ReadChunks implements Store.
func (s *MemStore) ReadChunks(_ context.Context, execID string, offset int64, max int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.records.Log(execID)
	if offset < 0 || offset >= int64(len(log)) {
		return nil, nil
	}
	end := min(int64(len(log)), offset+int64(max))
	return append([]byte(nil), log[offset:end]...), nil
}

// Close implements Store.
func (s *MemStore) Close() error { return nil }
