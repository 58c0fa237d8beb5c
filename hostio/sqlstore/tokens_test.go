package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/planeserver/storetest"
	"github.com/nymphd/nymph/wirecore/plane"
)

// A database of schema version 2 has no tokens table, and its workers no
// key fields; one whose hello reported a public_key was never enrolled.
// Migration 3 adds the table, and the restored plane takes such a worker
// for the bearer worker it was, so it keeps working as before.
func TestVersion2MigratesToTokens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", dsn(filepath.Join(dir, FileName), "immediate"))
	if err != nil {
		t.Fatal(err)
	}
	worker := `{"id":"w-old","machine_id":"m1","label":"old","tags":[],"queues":[],
		"capabilities":{"runners":["process"],"max_invocations":1,"workdir":"/tmp"},"versions":{},
		"public_key":"reported-not-enrolled","state":"active","created_at":"2026-01-02T03:04:05Z","last_seen":"2026-01-02T03:04:05Z"}`
	_, err = db.ExecContext(ctx, migrations[0]+migrations[1]+`
		INSERT INTO workers (id, doc) VALUES ('w-old', CAST(? AS BLOB));
		PRAGMA user_version = 2;`, worker)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := open(t, dir)
	tok := plane.TokenRecord{ID: "t1", SecretHash: strings.Repeat("ab", 32), CreatedAt: storetest.T0, ExpiresAt: storetest.T0.Add(time.Hour)}
	if err := s.Apply(ctx, plane.Batch{Tokens: []plane.TokenRecord{tok}}); err != nil {
		t.Fatalf("apply a token after the migration: %v", err)
	}
	snap := load(t, s)
	if len(snap.Tokens) != 1 || snap.Tokens[0].ID != "t1" || len(snap.Workers) != 1 {
		t.Fatalf("after the migration: %+v", snap)
	}
	p, err := plane.Restore(plane.Config{Entropy: rand.Reader}, snap, storetest.T0)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if w := p.Snapshot().Workers[0]; w.KeyID != "" || w.PublicKey != nil {
		t.Fatalf("an unenrolled worker of version 2 restored with a key: %+v", w)
	}
}
