package blobcache

import (
	"bytes"
	"context"
	"testing"
)

// A hit re-hashes the whole entry, so this is mostly SHA-256 over 1 MiB.
func BenchmarkLookupHit1MiB(b *testing.B) {
	c, _ := open(b, 0)
	data := payload(1<<20, 30)
	sha := digest(data)
	if _, _, _, err := c.Insert(context.Background(), bytes.NewReader(data), sha, 0); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := c.Lookup(sha); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// Each insert is a new digest, so every iteration writes, fsyncs and
// renames a new entry; the entry is then removed so the cache stays small
// and no trim runs.
func BenchmarkInsert1MiB(b *testing.B) {
	c, _ := open(b, 0)
	data := payload(1<<20, 31)
	r := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		i++
		for k := range 8 {
			data[k] = byte(i >> (8 * k))
		}
		r.Reset(data)
		p, _, size, err := c.Insert(context.Background(), r, "", 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := removeFile(p); err != nil {
			b.Fatal(err)
		}
		c.mu.Lock()
		c.total -= size
		c.mu.Unlock()
	}
}
