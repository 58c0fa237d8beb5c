package blobcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/internal/testkit"
)

// open is a cache in a fresh directory (one Open creates) and its log.
func open(t testing.TB, maxBytes int64) (*Cache, *testkit.SyncBuffer) {
	t.Helper()
	lb := &testkit.SyncBuffer{}
	c, err := Open(filepath.Join(t.TempDir(), "cache"), maxBytes, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	return c, lb
}

// payload is n bytes that differ for each seed.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func insert(t *testing.T, c *Cache, b []byte) string {
	t.Helper()
	p, sha, size, err := c.Insert(context.Background(), bytes.NewReader(b), digest(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	if sha != digest(b) || size != int64(len(b)) {
		t.Fatalf("Insert = %s, %d; want %s, %d", sha, size, digest(b), len(b))
	}
	return p
}

// tempFiles lists what is left in the cache's temporary directory.
func tempFiles(t *testing.T, c *Cache) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(c.Dir(), TempDirName))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}

// assertEmpty checks that a failed insert kept nothing: no entry, no
// temporary file, nothing counted.
func assertEmpty(t *testing.T, c *Cache, shas ...string) {
	t.Helper()
	for _, s := range shas {
		p, _ := c.Path(s)
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("entry %s: %v, want absent", p, err)
		}
	}
	if left := tempFiles(t, c); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if n := c.Bytes(); n != 0 {
		t.Errorf("Bytes = %d, want 0", n)
	}
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Lstat(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func TestMissInsertHit(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(100_000, 1)
	sha := digest(b)

	if p, ok, err := c.Lookup(sha); err != nil || ok || p != "" {
		t.Fatalf("Lookup before insert = %q, %v, %v; want a miss", p, ok, err)
	}
	p := insert(t, c, b)
	want := filepath.Join(c.Dir(), sha[:2], sha[2:4], sha)
	if p != want {
		t.Fatalf("path %s, want %s", p, want)
	}
	got, ok, err := c.Lookup(sha)
	if err != nil || !ok || got != want {
		t.Fatalf("Lookup = %q, %v, %v; want %s, true", got, ok, err, want)
	}
	if data, err := os.ReadFile(got); err != nil || !bytes.Equal(data, b) {
		t.Fatalf("entry content differs (err %v)", err)
	}
	// The protocol allows an upper-case digest; it names the same entry.
	if got, ok, err := c.Lookup(strings.ToUpper(sha)); err != nil || !ok || got != want {
		t.Fatalf("Lookup(upper) = %q, %v, %v", got, ok, err)
	}
	if n := c.Bytes(); n != int64(len(b)) {
		t.Fatalf("Bytes = %d, want %d", n, len(b))
	}
	if left := tempFiles(t, c); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestLookupRefusesBadDigest(t *testing.T) {
	c, _ := open(t, 0)
	for _, s := range []string{"", "abc", strings.Repeat("g", 64), strings.Repeat("a", 63), strings.Repeat("a", 65), "../" + strings.Repeat("a", 61)} {
		if _, ok, err := c.Lookup(s); err == nil || ok {
			t.Errorf("Lookup(%q) = %v, %v; want an error", s, ok, err)
		}
		if _, _, _, err := c.Insert(context.Background(), strings.NewReader("x"), s+"x", 0); err == nil {
			t.Errorf("Insert(want %q) accepted", s+"x")
		}
	}
}

func TestInsertWithoutWant(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(5000, 2)
	p, sha, size, err := c.Insert(context.Background(), bytes.NewReader(b), "", 0)
	if err != nil || sha != digest(b) || size != 5000 {
		t.Fatalf("Insert = %s, %s, %d, %v", p, sha, size, err)
	}
	if got, ok, err := c.Lookup(sha); err != nil || !ok || got != p {
		t.Fatalf("Lookup = %q, %v, %v", got, ok, err)
	}
}

func TestInsertKeepsExistingEntry(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(4096, 3)
	p := insert(t, c, b)
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if p2 := insert(t, c, b); p2 != p {
		t.Fatalf("second insert at %s, want %s", p2, p)
	}
	after, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("the existing entry was replaced")
	}
	if after.ModTime().Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("mtime %v not refreshed", after.ModTime())
	}
	if n := c.Bytes(); n != 4096 {
		t.Fatalf("Bytes = %d, want 4096 (counted once)", n)
	}
}

func TestLookupRefreshesMtime(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(1000, 4)
	p := insert(t, c, b)
	old := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Lookup(digest(b)); err != nil || !ok {
		t.Fatalf("Lookup = %v, %v", ok, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.ModTime().Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("mtime %v not refreshed by the hit", fi.ModTime())
	}
}

// rewrite replaces an entry's bytes in place, as a disk fault or a
// tamperer would.
func rewrite(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o444); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptEntryDetectedAndRefetched(t *testing.T) {
	b := payload(64<<10, 5)
	sha := digest(b)
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, p string)
	}{
		{"flipped byte", func(t *testing.T, p string) {
			bad := bytes.Clone(b)
			bad[len(bad)/2] ^= 0x40
			rewrite(t, p, bad)
		}},
		{"truncated", func(t *testing.T, p string) { rewrite(t, p, b[:len(b)-1]) }},
		{"emptied", func(t *testing.T, p string) { rewrite(t, p, nil) }},
		{"symlink to a copy", func(t *testing.T, p string) {
			other := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.WriteFile(other, b, 0o444); err != nil {
				t.Fatal(err)
			}
			if err := removeFile(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, p); err != nil {
				t.Skip("no symlinks here:", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, lb := open(t, 0)
			var calls int
			download := func(context.Context) (io.ReadCloser, error) {
				calls++
				return io.NopCloser(bytes.NewReader(b)), nil
			}
			p, hit, err := c.Fetch(context.Background(), sha, download, 0)
			if err != nil || hit || calls != 1 {
				t.Fatalf("first Fetch = %v, %v after %d downloads", hit, err, calls)
			}
			tc.corrupt(t, p)

			if got, ok, err := c.Lookup(sha); err != nil || ok || got != "" {
				t.Fatalf("Lookup of a corrupt entry = %q, %v, %v; want a miss", got, ok, err)
			}
			if exists(t, p) {
				t.Fatal("corrupt entry not removed")
			}
			if log := lb.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "corrupt entry removed") || !strings.Contains(log, sha) {
				t.Fatalf("no warning naming the entry in the log:\n%s", log)
			}
			if n := c.Bytes(); n != 0 {
				t.Fatalf("Bytes = %d after removal, want 0", n)
			}

			p2, hit, err := c.Fetch(context.Background(), sha, download, 0)
			if err != nil || hit || calls != 2 || p2 != p {
				t.Fatalf("refetch = %s, %v, %v after %d downloads", p2, hit, err, calls)
			}
			if data, err := os.ReadFile(p2); err != nil || !bytes.Equal(data, b) {
				t.Fatalf("refetched entry differs (err %v)", err)
			}
			if _, hit, err := c.Fetch(context.Background(), sha, download, 0); err != nil || !hit || calls != 2 {
				t.Fatalf("third Fetch = %v, %v after %d downloads; want a hit", hit, err, calls)
			}
		})
	}
}

// An Insert (not through Lookup) over an entry whose size shows it is not
// that digest's bytes replaces it rather than keeping it.
func TestInsertReplacesWrongSizeEntry(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(2000, 6)
	p := insert(t, c, b)
	rewrite(t, p, b[:10])
	insert(t, c, b)
	if data, err := os.ReadFile(p); err != nil || !bytes.Equal(data, b) {
		t.Fatalf("entry not replaced (err %v)", err)
	}
	if _, ok, err := c.Lookup(digest(b)); err != nil || !ok {
		t.Fatalf("Lookup = %v, %v", ok, err)
	}
}

func TestDigestMismatchKeepsNothing(t *testing.T) {
	c, _ := open(t, 0)
	b, other := payload(10_000, 7), payload(10_000, 8)
	_, _, _, err := c.Insert(context.Background(), bytes.NewReader(b), digest(other), 0)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Insert = %v, want ErrDigestMismatch", err)
	}
	if !strings.Contains(err.Error(), digest(other)) || !strings.Contains(err.Error(), digest(b)) {
		t.Fatalf("error %q does not name both digests", err)
	}
	assertEmpty(t, c, digest(b), digest(other))

	// Through Fetch as well: a download that is not what was asked for.
	_, _, err = c.Fetch(context.Background(), digest(other), func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, 0)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Fetch = %v, want ErrDigestMismatch", err)
	}
	assertEmpty(t, c, digest(b), digest(other))
}

func TestOverMaxRefused(t *testing.T) {
	c, _ := open(t, 0)
	b := payload(1001, 9)
	for _, want := range []string{digest(b), ""} {
		_, _, _, err := c.Insert(context.Background(), bytes.NewReader(b), want, 1000)
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Insert of 1001 bytes with max 1000 = %v, want ErrTooLarge", err)
		}
		assertEmpty(t, c, digest(b))
	}
	// Exactly the limit is fine.
	if _, _, size, err := c.Insert(context.Background(), bytes.NewReader(b[:1000]), "", 1000); err != nil || size != 1000 {
		t.Fatalf("Insert of exactly max = %d, %v", size, err)
	}
}

// endless never ends, so the limit is what stops it.
type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

func TestEndlessStreamStopsAtMax(t *testing.T) {
	c, _ := open(t, 0)
	if _, _, _, err := c.Insert(context.Background(), endless{}, "", 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Insert = %v, want ErrTooLarge", err)
	}
	assertEmpty(t, c)
}

// cancelAfter hands out chunks and cancels its context after n of them.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (r *cancelAfter) Read(p []byte) (int, error) {
	if r.n == 0 {
		r.cancel()
	} else {
		r.n--
	}
	return copy(p, bytes.Repeat([]byte{'z'}, 1024)), nil
}

func TestCancelledInsertLeavesNothing(t *testing.T) {
	c, _ := open(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, _, err := c.Insert(ctx, &cancelAfter{n: 3, cancel: cancel}, "", 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Insert = %v, want context.Canceled", err)
	}
	assertEmpty(t, c)

	// Cancelled before it starts: nothing is read at all.
	read := false
	_, _, _, err = c.Insert(ctx, readFunc(func([]byte) (int, error) { read = true; return 0, io.EOF }), "", 0)
	if !errors.Is(err, context.Canceled) || read {
		t.Fatalf("Insert with a cancelled context = %v (read %v)", err, read)
	}
	assertEmpty(t, c)
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

func TestReadErrorKeepsNothing(t *testing.T) {
	c, _ := open(t, 0)
	boom := errors.New("connection reset")
	r := io.MultiReader(bytes.NewReader(payload(3000, 1)), readFunc(func([]byte) (int, error) { return 0, boom }))
	if _, _, _, err := c.Insert(context.Background(), r, "", 0); !errors.Is(err, boom) {
		t.Fatalf("Insert = %v, want %v", err, boom)
	}
	assertEmpty(t, c)
}

func TestEvictionLeastRecentlyUsedFirst(t *testing.T) {
	c, _ := open(t, 3000)
	a, b, d := payload(1000, 'a'), payload(1000, 'b'), payload(1000, 'd')
	pa, pb, pd := insert(t, c, a), insert(t, c, b), insert(t, c, d)
	now := time.Now()
	// Insertion order a, b, d; use order b (oldest), d, a.
	for p, age := range map[string]time.Duration{pb: 3 * time.Hour, pd: 2 * time.Hour, pa: time.Hour} {
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}

	pe := insert(t, c, payload(1000, 'e'))
	if exists(t, pb) || !exists(t, pd) || !exists(t, pa) || !exists(t, pe) {
		t.Fatalf("after e: a %v, b %v, d %v, e %v; want only b evicted", exists(t, pa), exists(t, pb), exists(t, pd), exists(t, pe))
	}
	if n := c.Bytes(); n != 3000 {
		t.Fatalf("Bytes = %d, want 3000", n)
	}

	// A hit makes d the most recent; a is now the oldest.
	if _, ok, err := c.Lookup(digest(d)); err != nil || !ok {
		t.Fatalf("Lookup(d) = %v, %v", ok, err)
	}
	pf := insert(t, c, payload(1000, 'f'))
	if exists(t, pa) || !exists(t, pd) || !exists(t, pe) || !exists(t, pf) {
		t.Fatalf("after f: a %v, d %v, e %v, f %v; want a evicted", exists(t, pa), exists(t, pd), exists(t, pe), exists(t, pf))
	}

	// An entry larger than the whole cache evicts everything else but is
	// itself kept: it is the one the caller is about to use.
	pg := insert(t, c, payload(5000, 'g'))
	if exists(t, pd) || exists(t, pe) || exists(t, pf) || !exists(t, pg) {
		t.Fatalf("after g: d %v, e %v, f %v, g %v; want only g", exists(t, pd), exists(t, pe), exists(t, pf), exists(t, pg))
	}
	if n := c.Bytes(); n != 5000 {
		t.Fatalf("Bytes = %d, want 5000", n)
	}
}

func TestOpenCountsAndTrims(t *testing.T) {
	c, _ := open(t, 0)
	var paths []string
	for i := range 4 {
		paths = append(paths, insert(t, c, payload(1000, byte(i))))
	}
	now := time.Now()
	for i, p := range paths {
		ago := now.Add(-time.Duration(10-i) * time.Minute) // paths[0] oldest
		if err := os.Chtimes(p, ago, ago); err != nil {
			t.Fatal(err)
		}
	}
	// Names outside the layout are neither counted nor evicted.
	stray := []string{
		filepath.Join(c.Dir(), "README"),
		filepath.Join(c.Dir(), "ab", "notes.txt"),
		filepath.Join(c.Dir(), "ab", "cd", strings.Repeat("0", 64)), // wrong prefix
	}
	for _, p := range stray {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, 10_000), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	again, err := Open(c.Dir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := again.Bytes(); n != 4000 {
		t.Fatalf("reopened Bytes = %d, want 4000", n)
	}
	small, err := Open(c.Dir(), 2500, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := small.Bytes(); n != 2000 {
		t.Fatalf("Bytes after a trimming Open = %d, want 2000", n)
	}
	for i, p := range paths {
		if want := i >= 2; exists(t, p) != want {
			t.Errorf("entry %d present %v, want %v", i, !want, want)
		}
	}
	for _, p := range stray {
		if !exists(t, p) {
			t.Errorf("stray %s removed", p)
		}
	}
}

func TestOpenRemovesStaleTempFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := Open(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(c.Dir(), TempDirName)
	stale, fresh := filepath.Join(tmp, "insert-1.part"), filepath.Join(tmp, "insert-2.part")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-StaleTempAge - time.Minute)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	lb := &testkit.SyncBuffer{}
	if _, err := Open(dir, 0, slog.New(slog.NewTextHandler(lb, nil))); err != nil {
		t.Fatal(err)
	}
	if exists(t, stale) {
		t.Error("stale temporary file kept")
	}
	// Another process sharing the directory may be writing this one.
	if !exists(t, fresh) {
		t.Error("recent temporary file removed")
	}
	if !strings.Contains(lb.String(), "stale temporary file removed") {
		t.Errorf("removal not logged:\n%s", lb.String())
	}
}

func TestOpenDefaults(t *testing.T) {
	c, err := Open(t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.max != DefaultMaxBytes || DefaultMaxBytes != 20<<30 {
		t.Fatalf("max = %d, want %d", c.max, DefaultMaxBytes)
	}
	if _, err := Open("", 0, nil); err == nil {
		t.Fatal("Open(\"\") accepted")
	}
	if !filepath.IsAbs(c.Dir()) {
		t.Fatalf("Dir %q is not absolute", c.Dir())
	}
}
