package runners

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestTailKeepsTheLastBytes(t *testing.T) {
	tl := NewTail()
	if got := tl.String(); got != "" {
		t.Fatalf("empty tail: %q", got)
	}
	tl.Write([]byte("hello "))
	tl.Write([]byte("world\n"))
	if got := tl.String(); got != "hello world\n" {
		t.Fatalf("short output: %q", got)
	}
	// Past the bound only the last TailMax bytes stay, however they came.
	var want strings.Builder
	want.WriteString("hello world\n")
	for i := 0; want.Len() < 3*TailMax; i++ {
		line := strings.Repeat(string(rune('a'+i%26)), i%97) + "\n"
		want.WriteString(line)
		tl.Write([]byte(line))
		got := tl.String()
		w := want.String()
		if len(got) > TailMax {
			t.Fatalf("tail of %d bytes, bound %d", len(got), TailMax)
		}
		if !strings.HasSuffix(w, got) || len(got) != min(len(w), TailMax) {
			t.Fatalf("after %d bytes: tail of %d bytes is not the end of the output", len(w), len(got))
		}
	}
	// One write larger than the bound keeps its end.
	big := strings.Repeat("x", TailMax) + "END"
	tl.Write([]byte(big))
	if got := tl.String(); got != big[3:] {
		t.Fatalf("big write: %d bytes, ends %q", len(got), got[len(got)-5:])
	}
	// A nil Tail takes writes and keeps nothing.
	var none *Tail
	if n, err := none.Write([]byte("x")); n != 1 || err != nil {
		t.Fatalf("nil tail write: %d, %v", n, err)
	}
	if none.String() != "" {
		t.Fatal("nil tail is not empty")
	}
}

func TestTailIsValidUTF8(t *testing.T) {
	// "é" is two bytes: with an odd filler, the window starts inside one.
	tl := NewTail()
	tl.Write([]byte(strings.Repeat("é", TailMax)))
	got := tl.String()
	if !utf8.ValidString(got) || len(got) > TailMax || len(got) < TailMax-1 {
		t.Fatalf("cut inside a rune: valid %v, %d bytes", utf8.ValidString(got), len(got))
	}
	tl = NewTail()
	tl.Write([]byte("x" + strings.Repeat("€", TailMax/3))) // TailMax bytes: "€" is 3
	tl.Write([]byte("€"))
	got = tl.String()
	if !utf8.ValidString(got) || !strings.HasPrefix(got, "€") || len(got)%3 != 0 {
		t.Fatalf("front not at a rune start: %q…", got[:6])
	}

	// A rune not yet complete at the end is left out until it is.
	tl = NewTail()
	tl.Write([]byte("50% \xe2\x82"))
	if got := tl.String(); got != "50% " {
		t.Fatalf("half a rune at the end: %q", got)
	}
	tl.Write([]byte("\xac done"))
	if got := tl.String(); got != "50% € done" {
		t.Fatalf("rune completed: %q", got)
	}

	// Bytes that are no UTF-8 read as U+FFFD, and the bound still holds.
	tl = NewTail()
	tl.Write([]byte("a\xffb\xfe\xfdc"))
	if got := tl.String(); got != "a\uFFFDb\uFFFDc" {
		t.Fatalf("invalid bytes: %q", got)
	}
	tl = NewTail()
	tl.Write([]byte(strings.Repeat("\xffa", TailMax/2)))
	got = tl.String()
	if !utf8.ValidString(got) || len(got) > TailMax || !strings.HasSuffix(got, "\uFFFDa") {
		t.Fatalf("many invalid bytes: valid %v, %d bytes", utf8.ValidString(got), len(got))
	}
}

func TestTailSetAndReadFileEnd(t *testing.T) {
	tl := NewTail()
	tl.Write([]byte("old output"))
	fresh := NewTail()
	fresh.Write([]byte("line 1\nline 2\n"))
	tl.Set(fresh)
	if got := tl.String(); got != "line 1\nline 2\n" {
		t.Fatalf("set: %q", got)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "slurm.out")
	err := tl.ReadFileEnd(path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("missing file: %v", err)
	}
	if got := tl.String(); got != "line 1\nline 2\n" {
		t.Fatalf("missing file changed the tail: %q", got)
	}
	os.WriteFile(path, []byte("started\n"), 0o600)
	if err := tl.ReadFileEnd(path); err != nil {
		t.Fatal(err)
	}
	if got := tl.String(); got != "started\n" {
		t.Fatalf("short file: %q", got)
	}
	long := strings.Repeat("é", TailMax) + "\nlast line\n"
	os.WriteFile(path, []byte(long), 0o600)
	if err := tl.ReadFileEnd(path); err != nil {
		t.Fatal(err)
	}
	got := tl.String()
	if !utf8.ValidString(got) || len(got) > TailMax || !strings.HasSuffix(long, got) || len(got) < TailMax-1 {
		t.Fatalf("long file: valid %v, %d bytes", utf8.ValidString(got), len(got))
	}
}

// Writers on both streams and a reader at once (run with -race).
func TestTailConcurrentUse(t *testing.T) {
	tl := NewTail()
	var wg sync.WaitGroup
	for _, s := range []string{"out line\n", "err line\n"} {
		wg.Go(func() {
			for range 2000 {
				tl.Write([]byte(s))
			}
		})
	}
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if got := tl.String(); len(got) > TailMax || !utf8.ValidString(got) {
				t.Errorf("tail read while written: %d bytes", len(got))
				return
			}
			other := NewTail()
			other.Set(tl)
		}
	}()
	wg.Wait()
	close(stop)
	<-read
	got := tl.String()
	if len(got) != TailMax {
		t.Fatalf("after 36000 bytes: %d kept", len(got))
	}
	for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n")[1:] {
		if line != "out line" && line != "err line" {
			t.Fatalf("a write was torn: %q", line)
		}
	}
}
