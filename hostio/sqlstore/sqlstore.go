// Package sqlstore keeps the control plane's records in one SQLite file
// (modernc.org/sqlite, no cgo) under the server's data directory.
//
// It decides the schema, its migrations and durability: the database runs
// in WAL mode with synchronous=FULL, and Apply writes a whole plane.Batch
// in one transaction, so once Apply returns every record of the batch is
// on disk and a `kill -9` of the server loses none of it. Load rebuilds a
// plane.Snapshot from the tables; ReadChunks reads back an exec's log bytes.
// It also decides that the database and its -wal and -shm files are the
// owner's only (0600) before the first write; what counts as private is
// hostio/secretfile's rule.
//
// It does not decide what the records mean, which records change, or when
// to apply a batch: wirecore/plane does, and hostio/planeserver calls in.
// Records are stored as JSON documents beside the columns that are queried
// (ids, order), so a field added to a record needs no migration.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/wirecore/plane"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// FileName is the database file inside the data directory.
const FileName = "nymph.db"

// Store is the SQLite store. It is safe for concurrent use: writes are
// serialised by the store, reads run in parallel with them (WAL).
type Store struct {
	// db writes: its transactions BEGIN IMMEDIATE, taking the write lock up
	// front so two writers never deadlock upgrading a read lock.
	db *sql.DB
	// rdb reads: deferred transactions, so a reader sees a WAL snapshot
	// and never waits for (or blocks) the writer.
	rdb  *sql.DB
	path string
	log  *slog.Logger
	// writeMu serialises write transactions in this process, so they queue
	// here instead of spinning on SQLITE_BUSY.
	writeMu sync.Mutex
}

// Open opens (creating when absent) <dataDir>/nymph.db and brings its
// schema up to date. An absent dataDir is created 0700; whether an existing
// one is private enough is for its owner to check (nymph serve does).
func Open(ctx context.Context, dataDir string, log *slog.Logger) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("sqlstore: create data dir %s: %w", dataDir, err)
	}
	return OpenFile(ctx, filepath.Join(dataDir, FileName), log)
}

// OpenFile opens the database at path. The database and its -wal and -shm
// files are made 0600 before SQLite writes a byte: they hold exec ids and
// exec environments, which are credentials.
func OpenFile(ctx context.Context, path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := privateFiles(path, log); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn(path, "immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open %s: %w", path, err)
	}
	s := &Store{db: db, path: path, log: log}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if s.rdb, err = sql.Open("sqlite", dsn(path, "deferred")); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: open %s for reading: %w", path, err)
	}
	return s, nil
}

// privateFiles creates the database, -wal and -shm files 0600 (their
// content untouched when they exist) before SQLite opens them. SQLite makes
// the -wal and -shm it creates with the database file's mode, so a
// database that is 0600 from the start keeps them so whenever they are
// recreated; the ones made here also narrow files an older version left
// open to others.
func privateFiles(path string, log *slog.Logger) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		narrowed, err := secretfile.EnsureFile(p)
		if err != nil {
			return fmt.Errorf("sqlstore: %w", err)
		}
		if narrowed {
			log.Warn("sqlstore: narrowed a file others could read to 0600", "path", p)
		}
	}
	return nil
}

// dsn is the driver's connection string: WAL, synchronous=FULL (a commit
// is on disk when it returns), a busy timeout for the rare wait on another
// process, and the BEGIN mode of transactions.
func dsn(path, txlock string) string {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)", "foreign_keys(ON)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", txlock)
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error {
	rerr := s.rdb.Close()
	if err := errors.Join(s.db.Close(), rerr); err != nil {
		return fmt.Errorf("sqlstore: close %s: %w", s.path, err)
	}
	return nil
}

// migrations are applied in order; the index of the last one applied is
// kept in PRAGMA user_version. Append, never edit.
var migrations = []string{
	`CREATE TABLE workers (
		id   TEXT PRIMARY KEY,
		doc  BLOB NOT NULL
	);
	CREATE TABLE commands (
		id        TEXT PRIMARY KEY,
		worker_id TEXT NOT NULL,
		seq       INTEGER NOT NULL,
		doc       BLOB NOT NULL
	);
	CREATE INDEX commands_by_worker ON commands(worker_id, seq);
	CREATE TABLE invocations (
		id    TEXT PRIMARY KEY,
		seq   INTEGER NOT NULL,
		state TEXT NOT NULL,
		doc   BLOB NOT NULL
	);
	CREATE INDEX invocations_by_seq ON invocations(seq);
	CREATE TABLE execs (
		exec_id TEXT PRIMARY KEY,
		doc     BLOB NOT NULL
	);
	CREATE TABLE chunks (
		exec_id TEXT NOT NULL,
		off     INTEGER NOT NULL,
		data    BLOB NOT NULL,
		at_ns   INTEGER NOT NULL,
		PRIMARY KEY (exec_id, off)
	) WITHOUT ROWID;`,
	renameRunConfigKeys(),
	// Join tokens (only a hash of each secret). Workers gain key fields
	// in their documents, which need no migration: a worker stored before
	// has none, and is a bearer worker.
	`CREATE TABLE tokens (
		id   TEXT PRIMARY KEY,
		doc  BLOB NOT NULL
	);`,
}

// renameRunConfigKeys is migration 2. Version 1 stored an invocation's
// run_config sections under their Go field names; they now carry the wire's
// key names. encoding/json matches keys case-insensitively, so one-word keys
// ("Slurm", "Partition") still load as they are, but these five would be
// dropped on load, and a restarted plane would run the invocation without
// them. Docs are stored as BLOBs, which SQLite's JSON functions would take
// for JSONB, hence the casts; "->" hands json_set the value as JSON, so an
// object or a number stays one.
func renameRunConfigKeys() string {
	renames := []struct{ from, to string }{
		{`$.run_config.Slurm.NtasksPerNode`, `$.run_config.Slurm."ntasks-per-node"`},
		{`$.run_config.Slurm.CPUsPerTask`, `$.run_config.Slurm."cpus-per-task"`},
		{`$.run_config.Slurm.PollIntervalS`, `$.run_config.Slurm.poll_interval_s`},
		{`$.run_config.Kube.PollIntervalS`, `$.run_config.Kube.poll_interval_s`},
		// The inner key first: the outer rename moves the object it is in.
		{`$.run_config.Docker.RegistryAuth.PasswordEnv`, `$.run_config.Docker.RegistryAuth.password_env`},
		{`$.run_config.Docker.RegistryAuth`, `$.run_config.Docker.registry_auth`},
	}
	var b strings.Builder
	for _, r := range renames {
		fmt.Fprintf(&b, `UPDATE invocations
		SET doc = json_remove(json_set(CAST(doc AS TEXT), '%[2]s', CAST(doc AS TEXT) -> '%[1]s'), '%[1]s')
		WHERE json_type(CAST(doc AS TEXT), '%[1]s') IS NOT NULL;
	`, r.from, r.to)
	}
	return b.String()
}

func (s *Store) migrate(ctx context.Context) error {
	var version int
	err := s.write(ctx, "migrate "+s.path, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
			return fmt.Errorf("sqlstore: migrate %s: read version: %w", s.path, err)
		}
		if version > len(migrations) {
			return fmt.Errorf("sqlstore: %s has schema version %d, newer than this binary's %d", s.path, version, len(migrations))
		}
		for i := version; i < len(migrations); i++ {
			if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
				return fmt.Errorf("sqlstore: migrate %s to version %d: %w", s.path, i+1, err)
			}
		}
		// PRAGMA takes no bound parameters; the value is our own integer.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
			return fmt.Errorf("sqlstore: migrate %s: set version: %w", s.path, err)
		}
		return nil
	})
	if err == nil && version != len(migrations) {
		s.log.Info("sqlstore: schema ready", "path", s.path, "from", version, "to", len(migrations))
	}
	return err
}

// Apply writes a batch in one transaction: upserts (workers, commands,
// invocations, execs, tokens, chunks) then deletions (commands, forgotten
// invocations, forgotten execs with their logs), as plane.Batch orders
// them. When it returns nil the batch is durable.
func (s *Store) Apply(ctx context.Context, b plane.Batch) error {
	if b.Empty() {
		return nil
	}
	return s.write(ctx, "apply to "+s.path, func(tx *sql.Tx) error {
		if err := applyBatch(ctx, tx, &b); err != nil {
			return fmt.Errorf("sqlstore: apply to %s: %w", s.path, err)
		}
		return nil
	})
}

// write runs fill in one write transaction, committed when fill returns
// nil and rolled back otherwise; what names the work in errors. Writers
// of this process take turns (writeMu).
func (s *Store) write(ctx context.Context, what string, fill func(*sql.Tx) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlstore: %s: begin: %w", what, err)
	}
	defer tx.Rollback()
	if err := fill(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: %s: commit: %w", what, err)
	}
	return nil
}

func applyBatch(ctx context.Context, tx *sql.Tx, b *plane.Batch) error {
	for _, w := range b.Workers {
		if err := upsert(ctx, tx, `INSERT INTO workers(id, doc) VALUES (?, ?)
			ON CONFLICT(id) DO UPDATE SET doc = excluded.doc`, w, w.ID); err != nil {
			return fmt.Errorf("worker %s: %w", w.ID, err)
		}
	}
	for _, c := range b.Commands {
		if err := upsert(ctx, tx, `INSERT INTO commands(id, worker_id, seq, doc) VALUES (?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET worker_id = excluded.worker_id, seq = excluded.seq, doc = excluded.doc`,
			c, c.ID, c.WorkerID, int64(c.Seq)); err != nil {
			return fmt.Errorf("command %s: %w", c.ID, err)
		}
	}
	for _, inv := range b.Invocations {
		if err := upsert(ctx, tx, `INSERT INTO invocations(id, seq, state, doc) VALUES (?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, state = excluded.state, doc = excluded.doc`,
			inv, inv.ID, int64(inv.Seq), inv.State); err != nil {
			return fmt.Errorf("invocation %s: %w", inv.ID, err)
		}
	}
	for _, e := range b.Execs {
		if err := upsert(ctx, tx, `INSERT INTO execs(exec_id, doc) VALUES (?, ?)
			ON CONFLICT(exec_id) DO UPDATE SET doc = excluded.doc`, e, e.ExecID); err != nil {
			return fmt.Errorf("exec %s: %w", e.ExecID, err)
		}
	}
	for _, t := range b.Tokens {
		if err := upsert(ctx, tx, `INSERT INTO tokens(id, doc) VALUES (?, ?)
			ON CONFLICT(id) DO UPDATE SET doc = excluded.doc`, t, t.ID); err != nil {
			return fmt.Errorf("token %s: %w", t.ID, err)
		}
	}
	if err := appendChunks(ctx, tx, b.Chunks); err != nil {
		return err
	}
	for _, id := range b.DeleteCommands {
		if _, err := tx.ExecContext(ctx, `DELETE FROM commands WHERE id = ?`, id); err != nil {
			return fmt.Errorf("delete command %s: %w", id, err)
		}
	}
	for _, id := range b.DeleteInvocations {
		if _, err := tx.ExecContext(ctx, `DELETE FROM invocations WHERE id = ?`, id); err != nil {
			return fmt.Errorf("delete invocation %s: %w", id, err)
		}
	}
	for _, id := range b.DeleteExecs {
		if _, err := tx.ExecContext(ctx, `DELETE FROM chunks WHERE exec_id = ?`, id); err != nil {
			return fmt.Errorf("delete log of exec %s: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM execs WHERE exec_id = ?`, id); err != nil {
			return fmt.Errorf("delete exec %s: %w", id, err)
		}
	}
	for _, id := range b.DeleteWorkers {
		if _, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE id = ?`, id); err != nil {
			return fmt.Errorf("delete worker %s: %w", id, err)
		}
	}
	return nil
}

// upsert marshals rec to JSON and runs query with keys then the document.
func upsert(ctx context.Context, tx *sql.Tx, query string, rec any, keys ...any) error {
	doc, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = tx.ExecContext(ctx, query, append(keys, doc)...)
	return err
}

// appendChunks inserts chunks, each of which must start exactly where its
// exec's stored log ends: a gap or an overlap means the plane and the store
// disagree, and the whole batch is refused rather than storing a log that
// reads back wrong.
func appendChunks(ctx context.Context, tx *sql.Tx, chunks []plane.ChunkRecord) error {
	if len(chunks) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO chunks(exec_id, off, data, at_ns) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("prepare chunk insert: %w", err)
	}
	defer stmt.Close()
	for _, c := range chunks {
		var end int64
		// The last chunk by offset, found through the primary key.
		err := tx.QueryRowContext(ctx, `SELECT off + length(data) FROM chunks WHERE exec_id = ? ORDER BY off DESC LIMIT 1`, c.ExecID).Scan(&end)
		if errors.Is(err, sql.ErrNoRows) {
			end, err = 0, nil
		}
		if err != nil {
			return fmt.Errorf("chunk %s@%d: find log end: %w", c.ExecID, c.Offset, err)
		}
		if c.Offset != end {
			return fmt.Errorf("chunk %s@%d: log ends at %d", c.ExecID, c.Offset, end)
		}
		data := c.Data
		if data == nil {
			data = []byte{} // NOT NULL: an empty chunk is empty, not absent
		}
		if _, err := stmt.ExecContext(ctx, c.ExecID, c.Offset, data, c.At.UnixNano()); err != nil {
			return fmt.Errorf("chunk %s@%d: %w", c.ExecID, c.Offset, err)
		}
	}
	return nil
}

// Load reads every record back into a snapshot (chunk bytes excluded).
// Commands and invocations come oldest first.
func (s *Store) Load(ctx context.Context) (plane.Snapshot, error) {
	var snap plane.Snapshot
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return snap, fmt.Errorf("sqlstore: load %s: begin: %w", s.path, err)
	}
	defer tx.Rollback()
	if snap.Workers, err = loadDocs[plane.WorkerRecord](ctx, tx, `SELECT doc FROM workers ORDER BY id`); err != nil {
		return snap, fmt.Errorf("sqlstore: load workers from %s: %w", s.path, err)
	}
	if snap.Commands, err = loadDocs[plane.CommandRecord](ctx, tx, `SELECT doc FROM commands ORDER BY seq, id`); err != nil {
		return snap, fmt.Errorf("sqlstore: load commands from %s: %w", s.path, err)
	}
	if snap.Invocations, err = loadDocs[plane.InvocationRecord](ctx, tx, `SELECT doc FROM invocations ORDER BY seq, id`); err != nil {
		return snap, fmt.Errorf("sqlstore: load invocations from %s: %w", s.path, err)
	}
	if snap.Execs, err = loadDocs[plane.ExecRecord](ctx, tx, `SELECT doc FROM execs ORDER BY exec_id`); err != nil {
		return snap, fmt.Errorf("sqlstore: load execs from %s: %w", s.path, err)
	}
	if snap.Tokens, err = loadDocs[plane.TokenRecord](ctx, tx, `SELECT doc FROM tokens ORDER BY id`); err != nil {
		return snap, fmt.Errorf("sqlstore: load tokens from %s: %w", s.path, err)
	}
	return snap, nil
}

func loadDocs[T any](ctx context.Context, tx *sql.Tx, query string) ([]T, error) {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, err
		}
		var v T
		if err := json.Unmarshal(doc, &v); err != nil {
			return nil, fmt.Errorf("decode %T: %w", v, err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ReadChunks returns up to max bytes of an exec's stored log starting at
// byte offset (which may fall inside a chunk); past the stored end it
// returns what there is, possibly nothing.
func (s *Store) ReadChunks(ctx context.Context, execID string, offset int64, max int) ([]byte, error) {
	if offset < 0 || max <= 0 {
		return nil, nil
	}
	to := offset + int64(max)
	rows, err := s.rdb.QueryContext(ctx, `SELECT off, data FROM chunks
		WHERE exec_id = ? AND off < ? AND off + length(data) > ? ORDER BY off`, execID, to, offset)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: read logs of %s: %w", execID, err)
	}
	defer rows.Close()
	var out []byte
	next := offset
	for rows.Next() {
		var off int64
		var data []byte
		if err := rows.Scan(&off, &data); err != nil {
			return nil, fmt.Errorf("sqlstore: read logs of %s: %w", execID, err)
		}
		if off > next {
			return nil, fmt.Errorf("sqlstore: read logs of %s: gap at offset %d (next chunk at %d)", execID, next, off)
		}
		hi := min(int64(len(data)), to-off)
		out = append(out, data[next-off:hi]...)
		next = off + hi
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: read logs of %s: %w", execID, err)
	}
	return out, nil
}
