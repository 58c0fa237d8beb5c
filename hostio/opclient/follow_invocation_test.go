package opclient

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// window is the stdout_tail of output: its last wire.StdoutTailMax bytes.
func window(output string) string {
	if len(output) <= wire.StdoutTailMax {
		return output
	}
	return output[len(output)-wire.StdoutTailMax:]
}

// numbered is n distinct lines: output whose windows overlap only where
// they really do.
func numbered(from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, "line %05d\n", i)
	}
	return b.String()
}

func TestNewOutputAt(t *testing.T) {
	for _, tc := range []struct {
		name, prev, cur string
		at              int
		ok              bool
	}{
		{"grew", "a\n", "a\nb\n", 2, true},
		{"same", "a\nb\n", "a\nb\n", 4, true},
		// Not full: the whole output, which must start with prev.
		{"started over", "a\nb\n", "c\n", 0, false},
		{"repeats, not slid", "x\n", "x\nx\nx\n", 2, true},
		// Full: slid by 11 bytes (one line) since prev.
		{"slid", window(numbered(0, 400)), window(numbered(0, 401)), wire.StdoutTailMax - 11, true},
		// Full, slid by half a window.
		{"slid far", window(numbered(0, 400)), window(numbered(0, 586)), wire.StdoutTailMax - 186*11, true},
		// More than a window came between the two looks.
		{"gap", window(numbered(0, 400)), window(numbered(0, 800)), 0, false},
		// An overlap too short to trust: a gap.
		{"overlap too short", window(numbered(0, 400)), window(numbered(0, 400+370)), 0, false},
		// prev was not full: cur starts with it, however cur repeats.
		{"filled up", strings.Repeat("x\n", 100), strings.Repeat("x\n", wire.StdoutTailMax/2), 200, true},
	} {
		at, ok := NewOutputAt(tc.prev, tc.cur)
		if at != tc.at || ok != tc.ok {
			t.Errorf("%s: NewOutputAt = %d, %v; want %d, %v", tc.name, at, ok, tc.at, tc.ok)
		}
	}
}

// Following the successive windows of a growing output prints it once,
// in order, with a marker only where a look missed more than a window.
func TestTailFollowerPrintsEachByteOnce(t *testing.T) {
	var f TailFollower
	var printed strings.Builder
	output := ""
	look := func() { printed.WriteString(f.Next(window(output))) }
	look() // nothing yet
	for i := 0; i < 1000; i += 1 + i%37 {
		output += numbered(i, 1+i%37)
		look()
		look() // nothing new: nothing printed
	}
	if printed.String() != output {
		t.Fatalf("printed %d bytes, the output is %d; differ at %d", printed.Len(), len(output), firstDiff(printed.String(), output))
	}

	// A half line is printed as it comes, the rest when it does; End
	// closes the line.
	f = TailFollower{}
	if got := f.Next("working…"); got != "working…" {
		t.Fatalf("%q", got)
	}
	if got := f.Next("working… 50%"); got != " 50%" {
		t.Fatalf("%q", got)
	}
	if got := f.End(); got != "\n" {
		t.Fatalf("End after an open line: %q", got)
	}

	// A gap: the marker on a line of its own, then the whole tail.
	f = TailFollower{}
	f.Next("start")
	far := window(numbered(0, 900))
	if got := f.Next(far); got != "\n"+GapMarker+far {
		t.Fatalf("gap: %q…", got[:20])
	}
	if got := f.End(); got != "" {
		t.Fatalf("End after a closed line: %q", got)
	}
	// An empty tail (a restarted control plane) prints nothing and does
	// not lose the place.
	if got := f.Next(""); got != "" {
		t.Fatalf("empty tail: %q", got)
	}
	if got := f.Next(window(numbered(0, 901))); got != "line 00900\n" {
		t.Fatalf("after an empty tail: %q", got)
	}
	// The first tail seen already full: output before it was missed.
	f = TailFollower{}
	if got := f.Next(far); got != GapMarker+far {
		t.Fatalf("first tail full: %q…", got[:20])
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// FollowInvocation prints the tail as the plane shows it, then returns
// the ended invocation.
func TestFollowInvocation(t *testing.T) {
	states := []operator.Invocation{
		{ID: "i1", State: "queued"},
		{ID: "i1", State: wire.StateRunning},
		{ID: "i1", State: wire.StateRunning, StdoutTail: "one\n"},
		{ID: "i1", State: wire.StateRunning, StdoutTail: "one\ntwo\n"},
		{ID: "i1", State: wire.StateSucceeded, StdoutTail: "one\ntwo\nthr"},
	}
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/admin/invocations/i1" {
			writeJSON(w, 404, operator.Error{Error: "no route " + r.URL.Path})
			return
		}
		mu.Lock()
		inv := states[min(n, len(states)-1)]
		n++
		mu.Unlock()
		writeJSON(w, 200, inv)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	inv, err := c.FollowInvocation(context.Background(), "i1", time.Millisecond, &out)
	if err != nil {
		t.Fatal(err)
	}
	if inv.State != wire.StateSucceeded {
		t.Fatalf("%+v", inv)
	}
	if out.String() != "one\ntwo\nthr\n" {
		t.Fatalf("printed %q", out.String())
	}

	_, err = c.FollowInvocation(context.Background(), "nope", time.Millisecond, &out)
	if !IsNotFound(err) {
		t.Fatalf("unknown invocation: %v", err)
	}
}
