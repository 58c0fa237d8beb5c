// Package blobcache is the daemon's content-addressed cache of downloaded
// payloads: a payload that many commands reference is downloaded once and
// then served from a local file named by its SHA-256.
//
// What it decides:
//
//   - Layout: an entry is dir/ab/cd/abcd…, its full 64-hex lowercase
//     digest, under two directory levels taken from the digest's first two
//     bytes, so no directory grows past a few hundred names however many
//     entries there are. The levels are created when an entry first needs
//     them (creating all 65,536 up front would cost more disk than many
//     caches hold). Every directory is 0700; every entry is a read-only
//     file, 0444. Names that do not fit the layout are left alone and not
//     counted.
//   - Verification on every hit: Lookup re-hashes the file and compares it
//     with its name, so an entry that rotted on disk or was edited is
//     found, removed, logged at warn and reported as a miss, never handed
//     to a command. The cost is one read of the entry per hit.
//   - Atomic inserts: bytes are streamed to a temporary file under dir/tmp
//     (the same filesystem, so the final step is one rename(2)), hashed as
//     they are written, bounded, fsynced, made 0444 and renamed into place.
//     A reader sees a whole verified entry or none; a crash or a failure
//     leaves only a temporary file. An entry already present for the digest
//     is kept (its mtime refreshed) rather than replaced, unless its size
//     shows it cannot hold that digest's bytes.
//   - Stale temporary files: Open removes those in dir/tmp whose mtime is
//     older than StaleTempAge. It does not remove them all, because two
//     daemons may share one cache directory and the other one's insert may
//     be under way; a file being written has its mtime moved by every
//     write, so one that has not changed for an hour belongs to no live
//     insert. The rest of the cache is safe to share too: entries are
//     immutable and renames atomic. Only the running total (below) is
//     per process.
//   - LRU by mtime: a hit or an insert sets the entry's mtime to now, and
//     when the entries' bytes exceed maxBytes the least recently used
//     (oldest mtime) are removed until they fit, never the entry that was
//     just inserted. The total is counted once at Open and then kept in
//     memory, so an insert does not list the whole cache; only a trim
//     walks the fan-out again, and that walk corrects the total for
//     whatever another process did meanwhile.
//   - Eviction only removes the cache's name for an entry. A caller that
//     needs the bytes for longer than the next insert (a command that runs
//     for hours) hard-links the entry elsewhere on the same filesystem or
//     keeps it open; the link or the open file survives eviction.
//   - In-process de-duplication: concurrent Fetch calls for one digest
//     share one download.
//
// What it does not decide: where payloads come from (the download function
// a caller passes to Fetch, or the reader given to Insert), who may fetch
// what, or where the cache directory lives ([mounts] in the daemon's
// configuration).
package blobcache

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/nymphd/nymph/wirecore/wire"
)

// DefaultMaxBytes is [mounts] cache_max_bytes' default: 20 GiB.
const DefaultMaxBytes int64 = 20 << 30

// StaleTempAge is how long a temporary file in dir/tmp must have gone
// unwritten before Open removes it as a crashed insert's leftover.
const StaleTempAge = time.Hour

// TempDirName is the directory inside the cache that holds inserts under
// way. It cannot be mistaken for a fan-out level, which is two hex digits.
const TempDirName = "tmp"

// ErrDigestMismatch is wrapped by Insert's error when the bytes' SHA-256 is
// not the digest the caller wanted.
var ErrDigestMismatch = errors.New("blobcache: sha256 mismatch")

// ErrTooLarge is wrapped by Insert's error when the stream is longer than
// the limit it was given.
var ErrTooLarge = errors.New("blobcache: payload larger than its limit")

// bufSize is the read size for hashing and copying: large enough that a
// 100 MiB payload takes a few hundred system calls, small enough to pool.
const bufSize = 256 << 10

// Cache is one cache directory. Its methods are safe for concurrent use.
type Cache struct {
	dir string // absolute, so returned paths stay valid after a chdir
	tmp string
	max int64
	log *slog.Logger

	// bufs holds *[]byte of bufSize, so a hit or an insert does not
	// allocate its copy buffer.
	bufs sync.Pool

	// mu orders the changes to the set of entries made by this process
	// (rename into place, removal of a corrupt entry, eviction), so the
	// in-memory total matches them and a removal never takes away an
	// entry that replaced the one it meant.
	mu    sync.Mutex
	total int64 // bytes in entries

	// Fetch's de-duplication: sf runs one download per digest, flights
	// counts the callers waiting on it (fetch.go).
	sf      singleflight.Group
	fmu     sync.Mutex
	flights map[string]*flight
}

// Open prepares dir (created 0700) with its two-level fan-out; maxBytes <= 0
// means DefaultMaxBytes. It removes stale temporary files, counts the
// entries' bytes, and trims the cache when they exceed maxBytes (the limit
// may have been lowered since the last run). A directory that already
// exists keeps its mode: it is the operator's to choose.
func Open(dir string, maxBytes int64, log *slog.Logger) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("blobcache: open: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blobcache: open %s: %w", dir, err)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{
		dir:     abs,
		tmp:     filepath.Join(abs, TempDirName),
		max:     maxBytes,
		log:     log,
		flights: make(map[string]*flight),
	}
	c.bufs.New = func() any { b := make([]byte, bufSize); return &b }
	if err := os.MkdirAll(c.tmp, 0o700); err != nil {
		return nil, fmt.Errorf("blobcache: open %s: %w", abs, err)
	}
	if err := c.sweepTemp(time.Now()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.trimLocked(""); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir is the cache directory, absolute.
func (c *Cache) Dir() string { return c.dir }

// Bytes is the entries' total size as this process counts it.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Path is where the entry for sha lives (or would live); it does not say
// whether the entry exists or is intact: Lookup does.
func (c *Cache) Path(sha string) (string, error) {
	s, err := canonical(sha)
	if err != nil {
		return "", err
	}
	return c.entryPath(s), nil
}

// Lookup returns the path of the entry for sha (64 hex; upper case is
// accepted, as the protocol allows it, and the path is lower case),
// verified: its size and its SHA-256 are checked again on every hit (the
// whole file is re-hashed, and the bytes read must be its full length, so
// a file cut short while it was read does not pass), so a corrupt or
// tampered entry, or one that is not a regular file, is detected, removed,
// logged at warn and reported as a miss (ok false, err nil). A hit refreshes the entry's mtime
// (the LRU clock). A sha that is not 64 hex is an error.
//
// The path stays valid until the entry is evicted; see the package comment
// for a caller that needs it longer.
func (c *Cache) Lookup(sha string) (path string, ok bool, err error) {
	s, err := canonical(sha)
	if err != nil {
		return "", false, fmt.Errorf("blobcache: lookup: %w", err)
	}
	p := c.entryPath(s)
	// Lstat first: os.Open follows a symlink, and an entry is only ever a
	// regular file this cache wrote; a link would let the bytes change
	// after they were checked.
	lfi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("blobcache: lookup %s: %w", p, err)
	}
	if !lfi.Mode().IsRegular() {
		c.discard(p, lfi, "not a regular file", "mode", lfi.Mode().String())
		return "", false, nil
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil // evicted since the Lstat
	}
	if err != nil {
		return "", false, fmt.Errorf("blobcache: lookup %s: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false, fmt.Errorf("blobcache: lookup %s: %w", p, err)
	}
	if !os.SameFile(lfi, fi) {
		// Replaced between the Lstat and the open, by another process;
		// not worth a second try: the caller treats it as a miss and its
		// insert keeps whatever is there.
		return "", false, nil
	}
	got, n, err := c.hashFile(f)
	if err != nil {
		return "", false, fmt.Errorf("blobcache: lookup %s: %w", p, err)
	}
	switch {
	case n != fi.Size():
		c.discard(p, fi, "size changed while it was read", "size", fi.Size(), "read", n)
		return "", false, nil
	case got != s:
		c.discard(p, fi, "content does not match its name", "got", got)
		return "", false, nil
	}
	if err := touch(p); errors.Is(err, fs.ErrNotExist) {
		return "", false, nil // evicted while it was read
	} else if err != nil {
		// A cache whose clock cannot be moved still serves its entries;
		// it only evicts them in insertion order.
		c.log.Warn("blobcache: refresh mtime", "path", p, "err", err)
	}
	return p, true, nil
}

// Insert streams r (at most max bytes; more is an error wrapping
// ErrTooLarge, nothing is kept; max <= 0 means wire.PayloadMax) into a temp
// file inside the cache dir, hashing on the fly; when want is non-empty the
// digest must equal it (a mismatch is an error wrapping ErrDigestMismatch
// and nothing is kept). The file is fsynced, made 0444, and renamed into
// place atomically (rename(2)); an entry already present for that digest is
// kept as is, its mtime refreshed. Then the cache is trimmed to maxBytes by
// evicting least-recently-used entries (oldest mtime first), never the one
// just inserted. Returns the entry's path, its hex digest and size.
//
// ctx is checked between reads: a cancelled Insert returns ctx's error and
// leaves nothing behind. A Read that blocks is not interrupted by ctx; a
// reader from the network should carry ctx itself (an HTTP request made
// with it).
func (c *Cache) Insert(ctx context.Context, r io.Reader, want string, max int64) (path, sha string, size int64, err error) {
	if want != "" {
		if want, err = canonical(want); err != nil {
			return "", "", 0, fmt.Errorf("blobcache: insert: %w", err)
		}
	}
	if max <= 0 {
		max = wire.PayloadMax
	}
	f, err := os.CreateTemp(c.tmp, "insert-*.part")
	if err != nil {
		return "", "", 0, fmt.Errorf("blobcache: insert: %w", err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
		if tmp != "" {
			if rerr := removeFile(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				c.log.Warn("blobcache: remove temporary file", "path", tmp, "err", rerr)
			}
		}
	}()
	fail := func(err error) (string, string, int64, error) {
		if want != "" {
			return "", "", 0, fmt.Errorf("blobcache: insert %s: %w", want, err)
		}
		return "", "", 0, fmt.Errorf("blobcache: insert: %w", err)
	}

	h := sha256.New()
	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	buf := *bp
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			size += int64(n)
			if size > max {
				return fail(fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge))
			}
			h.Write(buf[:n])
			if _, err := f.Write(buf[:n]); err != nil {
				return fail(err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fail(fmt.Errorf("read: %w", rerr))
		}
	}
	sha = hex.EncodeToString(h.Sum(nil))
	if want != "" && sha != want {
		return fail(fmt.Errorf("the %d bytes have sha256 %s: %w", size, sha, ErrDigestMismatch))
	}
	// Durable before it is visible: after a crash an entry's name never
	// points at bytes that did not reach the disk.
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	closed = true
	if err == nil {
		err = os.Chmod(tmp, 0o444)
	}
	if err != nil {
		return fail(fmt.Errorf("%s: %w", tmp, err))
	}
	// A cancellation that came during the last read or the sync still
	// means the caller gave up: nothing new appears.
	if err := ctx.Err(); err != nil {
		return fail(err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	path = c.entryPath(sha)
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().IsRegular() && fi.Size() == size:
		// Same name, same size: the same bytes unless the disk lied, and
		// the next Lookup checks that. Keeping it leaves alone a link a
		// caller may have made to it.
		if err := touch(path); err != nil {
			c.log.Warn("blobcache: refresh mtime", "path", path, "err", err)
		}
	case err == nil:
		// Cannot hold this digest's bytes: replace it.
		c.log.Warn("blobcache: entry of the wrong size replaced", "path", path, "size", fi.Size(), "want_size", size, "mode", fi.Mode().String())
		if err := removeFile(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("remove %s: %w", path, err))
		}
		c.recountLocked()
		fallthrough
	case errors.Is(err, fs.ErrNotExist):
		leaf := filepath.Dir(path)
		if err := os.MkdirAll(leaf, 0o700); err != nil {
			return fail(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fail(err)
		}
		tmp = ""
		syncDir(leaf)
		c.total += size
	default:
		return fail(err)
	}
	if c.total > c.max {
		if err := c.trimLocked(path); err != nil {
			// The entry is in place; a failed trim only leaves the cache
			// over its limit until the next insert.
			c.log.Warn("blobcache: trim", "dir", c.dir, "err", err)
		}
	}
	return path, sha, size, nil
}

// hashFile reads f to its end and returns its SHA-256 and length.
func (c *Cache) hashFile(f *os.File) (string, int64, error) {
	h := sha256.New()
	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	// Read through a plain io.Reader: *os.File's WriteTo would allocate a
	// buffer of its own.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, *bp)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// discard removes the entry at p, which failed verification, unless it is
// no longer the file that was checked (fi): another insert may have put a
// good entry there since.
func (c *Cache) discard(p string, fi fs.FileInfo, reason string, attrs ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, err := os.Lstat(p)
	if err != nil || !os.SameFile(cur, fi) {
		return
	}
	c.log.Warn("blobcache: corrupt entry removed", append([]any{"path", p, "reason", reason}, attrs...)...)
	if err := removeFile(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("blobcache: remove corrupt entry", "path", p, "err", err)
		return
	}
	c.recountLocked()
}

// recountLocked sets the total from a scan. It runs after a corrupt entry
// is removed: the file's size now need not be the size that was counted
// for it (a truncation changes both), and this is rare enough that a walk
// costs nothing that matters. c.mu is held.
func (c *Cache) recountLocked() {
	_, total, err := c.scan()
	if err != nil {
		// The total stays as it was until the next trim recounts it.
		c.log.Warn("blobcache: recount", "dir", c.dir, "err", err)
		return
	}
	c.total = total
}

// entry is one file of the fan-out, as a trim sees it.
type entry struct {
	path  string
	size  int64
	mtime time.Time
}

// scan lists the entries: only names that fit the layout, so a stray file
// is neither counted nor evicted.
func (c *Cache) scan() ([]entry, int64, error) {
	var out []entry
	var total int64
	l1, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, 0, fmt.Errorf("blobcache: scan %s: %w", c.dir, err)
	}
	for _, d1 := range l1 {
		if !d1.IsDir() || !isHexPair(d1.Name()) {
			continue
		}
		p1 := filepath.Join(c.dir, d1.Name())
		l2, err := os.ReadDir(p1)
		if err != nil {
			return nil, 0, fmt.Errorf("blobcache: scan %s: %w", p1, err)
		}
		for _, d2 := range l2 {
			if !d2.IsDir() || !isHexPair(d2.Name()) {
				continue
			}
			p2 := filepath.Join(p1, d2.Name())
			files, err := os.ReadDir(p2)
			if err != nil {
				return nil, 0, fmt.Errorf("blobcache: scan %s: %w", p2, err)
			}
			prefix := d1.Name() + d2.Name()
			for _, f := range files {
				name := f.Name()
				if !f.Type().IsRegular() || !isEntryName(name) || !strings.HasPrefix(name, prefix) {
					continue
				}
				fi, err := f.Info()
				if errors.Is(err, fs.ErrNotExist) {
					continue // removed since the listing
				}
				if err != nil {
					return nil, 0, fmt.Errorf("blobcache: scan %s: %w", filepath.Join(p2, name), err)
				}
				out = append(out, entry{path: filepath.Join(p2, name), size: fi.Size(), mtime: fi.ModTime()})
				total += fi.Size()
			}
		}
	}
	return out, total, nil
}

// trimLocked recounts the entries and, when they exceed the limit, removes
// the least recently used until they fit, never keep. c.mu is held.
func (c *Cache) trimLocked(keep string) error {
	entries, total, err := c.scan()
	if err != nil {
		return err
	}
	c.total = total
	if total <= c.max {
		return nil
	}
	// Oldest first; the name breaks ties so the order is the same on
	// every run (mtimes may be coarse).
	slices.SortFunc(entries, func(a, b entry) int {
		if d := a.mtime.Compare(b.mtime); d != 0 {
			return d
		}
		return cmp.Compare(a.path, b.path)
	})
	var n int
	var freed int64
	for _, e := range entries {
		if c.total <= c.max {
			break
		}
		if e.path == keep {
			continue
		}
		if err := removeFile(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("blobcache: evict", "path", e.path, "err", err)
			continue
		}
		c.log.Debug("blobcache: evicted", "path", e.path, "size", e.size, "mtime", e.mtime)
		c.total -= e.size
		freed += e.size
		n++
	}
	c.log.Info("blobcache: trimmed", "dir", c.dir, "evicted", n, "freed_bytes", freed, "bytes", c.total, "max_bytes", c.max)
	return nil
}

// sweepTemp removes the files in dir/tmp not written since StaleTempAge
// before now (see the package comment for why not all of them).
func (c *Cache) sweepTemp(now time.Time) error {
	files, err := os.ReadDir(c.tmp)
	if err != nil {
		return fmt.Errorf("blobcache: sweep %s: %w", c.tmp, err)
	}
	for _, f := range files {
		if !f.Type().IsRegular() {
			continue
		}
		p := filepath.Join(c.tmp, f.Name())
		fi, err := f.Info()
		if err != nil || now.Sub(fi.ModTime()) < StaleTempAge {
			continue
		}
		if err := removeFile(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("blobcache: remove stale temporary file", "path", p, "err", err)
			continue
		}
		c.log.Info("blobcache: stale temporary file removed", "path", p, "size", fi.Size(), "mtime", fi.ModTime())
	}
	return nil
}

func (c *Cache) entryPath(sha string) string {
	return filepath.Join(c.dir, sha[0:2], sha[2:4], sha)
}

// canonical checks that sha is 64 hex digits and returns it in lower case,
// the one spelling used for names.
func canonical(sha string) (string, error) {
	if !wire.ValidSHA256(sha) {
		return "", fmt.Errorf("sha256 %q is not 64 hex digits", sha)
	}
	return strings.ToLower(sha), nil
}

func isHexPair(s string) bool { return len(s) == 2 && isLowerHex(s) }

func isEntryName(s string) bool { return len(s) == sha256.Size*2 && isLowerHex(s) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// touch sets p's mtime (and atime) to now: the LRU clock.
func touch(p string) error {
	now := time.Now()
	return os.Chtimes(p, now, now)
}

// removeFile removes p. Windows refuses to delete a read-only file, which
// every entry is, so there it clears the attribute and tries again.
func removeFile(p string) error {
	err := os.Remove(p)
	if err != nil && runtime.GOOS == "windows" && !errors.Is(err, fs.ErrNotExist) {
		if os.Chmod(p, 0o600) == nil {
			err = os.Remove(p)
		}
	}
	return err
}

// syncDir makes a rename in dir durable. Best effort: Windows cannot sync
// a directory, and the entry is already correct in either outcome.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
