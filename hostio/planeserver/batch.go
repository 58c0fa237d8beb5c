package planeserver

import "github.com/nymphd/nymph/wirecore/plane"

// batchMerger folds the batches of several steps into one, keeping one
// entry per record (its latest state), so a group needs one Apply and a
// store never sees the same record twice in a batch.
type batchMerger struct {
	b       plane.Batch
	workers map[string]int
	cmds    map[string]int
	invs    map[string]int
	execs   map[string]int
}

func (m *batchMerger) reset() {
	clear(m.b.Workers)
	clear(m.b.Commands)
	clear(m.b.Invocations)
	clear(m.b.Execs)
	clear(m.b.Chunks)
	m.b = plane.Batch{
		Workers:           m.b.Workers[:0],
		Commands:          m.b.Commands[:0],
		DeleteCommands:    m.b.DeleteCommands[:0],
		Invocations:       m.b.Invocations[:0],
		Execs:             m.b.Execs[:0],
		Chunks:            m.b.Chunks[:0],
		DeleteInvocations: m.b.DeleteInvocations[:0],
		DeleteExecs:       m.b.DeleteExecs[:0],
	}
	if m.workers == nil {
		m.workers, m.cmds, m.invs, m.execs = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	}
	clear(m.workers)
	clear(m.cmds)
	clear(m.invs)
	clear(m.execs)
}

func (m *batchMerger) empty() bool { return m.b.Empty() }

func (m *batchMerger) merge(b *plane.Batch) {
	for _, r := range b.Workers {
		m.b.Workers = upsert(m.b.Workers, m.workers, r.ID, r)
	}
	for _, r := range b.Commands {
		m.b.Commands = upsert(m.b.Commands, m.cmds, r.ID, r)
	}
	for _, r := range b.Invocations {
		m.b.Invocations = upsert(m.b.Invocations, m.invs, r.ID, r)
	}
	for _, r := range b.Execs {
		m.b.Execs = upsert(m.b.Execs, m.execs, r.ExecID, r)
	}
	m.b.Chunks = append(m.b.Chunks, b.Chunks...)
	// Deletes apply after upserts, so a command created in one step and
	// delivered in a later one of the same group nets out to nothing
	// stored — correctly, as a delete of an absent key.
	m.b.DeleteCommands = append(m.b.DeleteCommands, b.DeleteCommands...)
	m.b.DeleteInvocations = append(m.b.DeleteInvocations, b.DeleteInvocations...)
	m.b.DeleteExecs = append(m.b.DeleteExecs, b.DeleteExecs...)
}

func upsert[T any](list []T, index map[string]int, id string, r T) []T {
	if i, ok := index[id]; ok {
		list[i] = r
		return list
	}
	index[id] = len(list)
	return append(list, r)
}
