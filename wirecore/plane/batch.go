package plane

import "slices"

// BatchMerger builds one Batch holding one entry per record, its latest
// state, so a store never has to care about order within a batch. Step
// builds its Batch with one; a host that applies the batches of several
// Steps with one Store.Apply folds them into another (Merge), which keeps
// the rule across them. The zero value is empty. It is not safe for
// concurrent use.
type BatchMerger struct {
	b Batch
	// at is where each upserted record's entry is in b.
	at map[recordKey]int
}

type recordKey struct {
	kind recordKind
	id   string
}

type recordKind uint8

const (
	workerRecord recordKind = iota
	commandRecord
	invocationRecord
	execRecord
	tokenRecord
)

// maxKeptIndex bounds the index Reset keeps for reuse: clearing a map
// costs its capacity, so one that grew for a large batch (a tick that
// marks a whole fleet lost) is dropped rather than cleared on every step
// after it.
const maxKeptIndex = 1024

// Reset empties m, keeping its storage for the next batch. A Batch that
// Batch returned before is no longer valid.
func (m *BatchMerger) Reset() {
	if m.b.Empty() && len(m.at) == 0 {
		// Most steps (an idle poll's) change nothing, and rewriting
		// the ten slice headers is then the write barriers' cost only.
		return
	}
	clear(m.b.Workers)
	clear(m.b.Commands)
	clear(m.b.Invocations)
	clear(m.b.Execs)
	clear(m.b.Chunks)
	clear(m.b.Tokens)
	m.b = Batch{
		Workers:           m.b.Workers[:0],
		Commands:          m.b.Commands[:0],
		DeleteCommands:    m.b.DeleteCommands[:0],
		Invocations:       m.b.Invocations[:0],
		Execs:             m.b.Execs[:0],
		Chunks:            m.b.Chunks[:0],
		DeleteInvocations: m.b.DeleteInvocations[:0],
		DeleteExecs:       m.b.DeleteExecs[:0],
		DeleteWorkers:     m.b.DeleteWorkers[:0],
		Tokens:            m.b.Tokens[:0],
	}
	if len(m.at) > maxKeptIndex {
		m.at = nil
	}
	clear(m.at)
}

// Batch is what m holds, valid until m changes.
func (m *BatchMerger) Batch() Batch { return m.b }

// Empty reports whether m holds no change.
func (m *BatchMerger) Empty() bool { return m.b.Empty() }

// Merge folds b, the batch of a later Step, into m. A record in both keeps
// b's entry, in the place of the first; chunks and deletes are appended.
// A delete is not netted against an earlier put of the same record: the
// store applies deletes after upserts, which comes to the same records.
func (m *BatchMerger) Merge(b *Batch) {
	for _, r := range b.Workers {
		m.putWorker(r)
	}
	for _, r := range b.Commands {
		m.putCommand(r)
	}
	for _, r := range b.Invocations {
		m.putInvocation(r)
	}
	for _, r := range b.Execs {
		m.putExec(r)
	}
	for _, r := range b.Tokens {
		m.putToken(r)
	}
	m.b.Chunks = append(m.b.Chunks, b.Chunks...)
	m.b.DeleteCommands = append(m.b.DeleteCommands, b.DeleteCommands...)
	m.b.DeleteInvocations = append(m.b.DeleteInvocations, b.DeleteInvocations...)
	m.b.DeleteExecs = append(m.b.DeleteExecs, b.DeleteExecs...)
	m.b.DeleteWorkers = append(m.b.DeleteWorkers, b.DeleteWorkers...)
}

func (m *BatchMerger) putWorker(r WorkerRecord) {
	m.b.Workers = upsert(m, workerRecord, r.ID, m.b.Workers, r)
}

func (m *BatchMerger) putCommand(r CommandRecord) {
	m.b.Commands = upsert(m, commandRecord, r.ID, m.b.Commands, r)
}

func (m *BatchMerger) putInvocation(r InvocationRecord) {
	m.b.Invocations = upsert(m, invocationRecord, r.ID, m.b.Invocations, r)
}

func (m *BatchMerger) putExec(r ExecRecord) {
	m.b.Execs = upsert(m, execRecord, r.ExecID, m.b.Execs, r)
}

func (m *BatchMerger) putToken(r TokenRecord) {
	m.b.Tokens = upsert(m, tokenRecord, r.ID, m.b.Tokens, r)
}

// upsert replaces the entry of record id in list, or appends r.
func upsert[T any](m *BatchMerger, kind recordKind, id string, list []T, r T) []T {
	k := recordKey{kind, id}
	if i, ok := m.at[k]; ok {
		list[i] = r
		return list
	}
	if m.at == nil {
		m.at = make(map[recordKey]int)
	}
	m.at[k] = len(list)
	return append(list, r)
}

// deleteCommand drops a delivered command within one Step: one put in
// this same batch (created or taken back in this Step) never reaches the
// store at all; any other is deleted.
func (m *BatchMerger) deleteCommand(id string) {
	i, ok := m.at[recordKey{commandRecord, id}]
	if !ok {
		m.b.DeleteCommands = append(m.b.DeleteCommands, id)
		return
	}
	delete(m.at, recordKey{commandRecord, id})
	m.b.Commands = slices.Delete(m.b.Commands, i, i+1)
	for j := i; j < len(m.b.Commands); j++ {
		m.at[recordKey{commandRecord, m.b.Commands[j].ID}] = j
	}
}

func (m *BatchMerger) appendChunk(c ChunkRecord) { m.b.Chunks = append(m.b.Chunks, c) }

func (m *BatchMerger) deleteInvocation(id string) {
	m.b.DeleteInvocations = append(m.b.DeleteInvocations, id)
}

func (m *BatchMerger) deleteExec(id string) { m.b.DeleteExecs = append(m.b.DeleteExecs, id) }

func (m *BatchMerger) deleteWorker(id string) { m.b.DeleteWorkers = append(m.b.DeleteWorkers, id) }

// The put helpers of the Plane go through its step's BatchMerger.

func (p *Plane) putWorker(w *worker) {
	r := cloneWorker(w.rec)
	w.persistedSeen = r.LastSeen
	p.batch.putWorker(r)
}

func (p *Plane) putCommand(c CommandRecord)        { p.batch.putCommand(c) }
func (p *Plane) deleteCommand(id string)           { p.batch.deleteCommand(id) }
func (p *Plane) putInvocation(r *InvocationRecord) { p.batch.putInvocation(*r) }
func (p *Plane) putExec(r *ExecRecord)             { p.batch.putExec(*r) }
func (p *Plane) putToken(r *TokenRecord)           { p.batch.putToken(cloneToken(*r)) }
