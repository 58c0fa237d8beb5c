package planeserver

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Store keeps the plane's records.
//
// Durability: Apply returns only once the whole batch is durable — after a
// crash (kill -9, power loss of the process) the next Load sees either all
// of a batch or none of it, and every batch whose Apply returned nil. The
// server sends the replies of a step only after Apply of that step's batch
// succeeded, so an acknowledged command, invocation, exec result or log
// chunk is never lost. A failed Apply must leave the store as it was before
// the call (the server then rebuilds the plane from Load).
//
// Semantics of a batch (see plane.Batch): Workers, Commands, Invocations
// and Execs are upserts keyed by their ID (ExecID for execs); Chunks are
// appends keyed by (ExecID, Offset); DeleteCommands, DeleteInvocations
// and DeleteExecs (which takes the exec's chunks with it) are applied after
// the upserts. Records are opaque values to the store: it may keep each one as
// a JSON document (every record type marshals with encoding/json) plus the
// columns it needs to find them.
//
// Load returns every record except chunk bytes, in any order. ReadChunks
// returns up to max bytes of an exec's log starting at byte offset (chunks
// are contiguous: chunk k+1 starts at chunk k's Offset+len(Data)); a range
// past the stored end returns what there is, possibly nothing. offset may
// fall inside a chunk. A batch holding a chunk that does not start where
// its exec's log ends (counting the batch's own chunks before it) is
// refused whole. A chunk's Data is the caller's again once Apply returns,
// and the bytes ReadChunks returns are the caller's.
//
// The server calls Apply, Load and ReadChunks from more than one goroutine
// (Apply only from its loop, ReadChunks from request handlers), so a Store
// must be safe for concurrent use, and a Load beside an Apply sees the
// batch whole or not at all. Close releases it; no call follows.
//
// hostio/planeserver/storetest holds a Store to all of this; every Store
// runs it.
type Store interface {
	Apply(ctx context.Context, b plane.Batch) error
	Load(ctx context.Context) (plane.Snapshot, error)
	ReadChunks(ctx context.Context, execID string, offset int64, max int) ([]byte, error)
	Close() error
}

// BlobPathPrefix is where the server mounts BlobStore.Handler: every path
// under it (prefix kept, not stripped) goes to the handler. Presigned URLs
// must point under it.
const BlobPathPrefix = wire.BlobPathPrefix

// ErrPresignInvalid marks a presign request the BlobStore refuses (unknown
// op, bad namespace or key, size over wire.PayloadMax): the server answers
// 400 with the error's text. ErrPresignNotFound (a get of a key the
// namespace does not hold) is a 404, ErrPresignConflict (a put of a key the
// namespace holds, without overwrite) a 409. Any other error is a 500.
var (
	ErrPresignInvalid  = errors.New("presign: invalid request")
	ErrPresignNotFound = errors.New("presign: not found")
	ErrPresignConflict = errors.New("presign: conflict")
)

// Presign is one presign request as the blob store receives it.
type Presign struct {
	Namespace string // the route's {ns}: a key lives in its namespace
	Op        string // "get" or "put"
	Key       string // the blob store may choose one for a put when empty
	Size      int64  // the announced size of a put; 0 when absent
	JobID     string // the request's jobId (may be empty)
	Kind      string // the request's kind (may be empty)
	Overwrite bool   // a put may replace an existing blob
}

// BlobStore keeps payload blobs and signs expiring URLs to them.
//
// Presign answers POST /v1/namespaces/{ns}/payloads/presign; now is the
// time the URL's expiry counts from. The response's URL is absolute and
// points under BlobPathPrefix on this server.
//
// Handler serves the signed URLs (GET and PUT, and a get URL's download
// by POST through a relay, DownloadByPost), checking signature and expiry
// itself; requests reach it without any bearer check.
type BlobStore interface {
	Presign(p Presign, now time.Time) (wire.PresignResponse, error)
	Handler() http.Handler
}
