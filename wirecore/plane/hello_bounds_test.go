package plane_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// goldenSeeds adds the golden vectors named to the corpus, as they are
// and cut short, so the seeds run with every `go test`.
func goldenSeeds(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", "wire", "testdata", n+".msgpack"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
}

// FuzzHelloPath drives a raw hello body the way a host does —
// MissingHelloField, then the decoder, then the plane — and checks that
// nothing panics, nothing is allocated for a count the body cannot hold
// (the seeds include the five bytes that once took serve down), and the
// answer is one a daemon understands: 200 (a worker, or a reject), or a
// 422 naming a field.
func FuzzHelloPath(f *testing.F) {
	goldenSeeds(f, "hello_request", "hello_request_minimal")
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xdf, 0x01, 0x00, 0x00, 0x00})
	f.Add(append(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "capabilities"), 0xdf, 0xff, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, raw []byte) {
		missing, err := plane.MissingHelloField(raw)
		if err != nil {
			return // the host answers 400
		}
		var body wire.HelloRequest
		if missing == "" {
			if rest, err := body.UnmarshalMsg(raw); err != nil || len(rest) != 0 {
				return // 400
			}
		}
		p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{7}), MaxWorkers: 1})
		r := lastReply(t, p.Step(t0, plane.Hello{Auth: bearer, Req: 1, Body: body, Missing: missing}))
		switch b := r.Body.(type) {
		case wire.HelloResponse:
			if r.Status != plane.StatusOK {
				t.Fatalf("hello response with status %d", r.Status)
			}
			tidied := body
			tidied.Versions.Tidy() // as the plane takes probe output
			if b.Reject == nil && (missing != "" || tidied.Validate() != nil) {
				t.Fatalf("admitted a hello that is missing %q or invalid: %+v", missing, tidied.Validate())
			}
		case wire.ValidationError:
			if r.Status != plane.StatusUnprocessableEntity || b.Field == "" || b.Error == "" || len(b.Message) > 512 {
				t.Fatalf("422 %+v with status %d", b, r.Status)
			}
		default:
			t.Fatalf("hello answered %d %#v", r.Status, r.Body)
		}
	})
}

// A hello's map count comes from the wire: five bytes announcing 2^32-1
// entries, or 2^24, must be refused without allocating for the count.
func TestMissingHelloFieldAllocatesNothingForAnnouncedCounts(t *testing.T) {
	cases := map[string][]byte{
		"map32 of 2^32-1":          {0xdf, 0xff, 0xff, 0xff, 0xff},
		"map32 of 2^24":            {0xdf, 0x01, 0x00, 0x00, 0x00},
		"map32 of 2^20":            {0xdf, 0x00, 0x10, 0x00, 0x00},
		"map16 of 65535":           {0xde, 0xff, 0xff},
		"nested capabilities 2^24": append(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "capabilities"), 0xdf, 0x01, 0x00, 0x00, 0x00),
	}
	for name, raw := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := plane.MissingHelloField(raw)
		runtime.ReadMemStats(&after)
		if err == nil && !strings.HasPrefix(name, "nested") {
			t.Errorf("%s: no error", name)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
			t.Errorf("%s: %d bytes allocated for a %d-byte body, want at most 64 KiB", name, got, len(raw))
		}
	}
	// The count is checked against the bytes that follow: a map that
	// announces more entries than it has room for is short, however the
	// count compares with the collection limit.
	if _, err := plane.MissingHelloField([]byte{0xdf, 0x00, 0x00, 0x00, 0x03, 0xa1, 'a', 0xc0}); !errors.Is(err, msgp.ErrShortBytes) {
		t.Errorf("3 entries in 3 bytes: %v, want %v", err, msgp.ErrShortBytes)
	}
	if _, err := plane.MissingHelloField([]byte{0xdf, 0x00, 0x01, 0x00, 0x01}); !errors.Is(err, msgp.ErrLimitExceeded) {
		t.Errorf("65537 entries: %v, want %v", err, msgp.ErrLimitExceeded)
	}
}

// A map of exactly the collection limit is read (unknown keys skipped,
// the required ones found); one entry more is refused.
func TestMissingHelloFieldCollectionLimitBothSides(t *testing.T) {
	body := func(n uint32) []byte {
		h := helloReq("m1")
		b, err := h.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		have, rest, _ := msgp.ReadMapHeaderBytes(b)
		out := msgp.AppendMapHeader(nil, n)
		for i := have; i < n; i++ {
			out = msgp.AppendString(out, fmt.Sprintf("x%d", i))
			out = msgp.AppendNil(out)
		}
		return append(out, rest...)
	}
	if missing, err := plane.MissingHelloField(body(wire.MaxCollectionEntries)); err != nil || missing != "" {
		t.Errorf("%d keys: %q %v, want every required key found", wire.MaxCollectionEntries, missing, err)
	}
	if _, err := plane.MissingHelloField(body(wire.MaxCollectionEntries + 1)); !errors.Is(err, msgp.ErrLimitExceeded) {
		t.Errorf("%d keys: %v, want %v", wire.MaxCollectionEntries+1, err, msgp.ErrLimitExceeded)
	}
}

// The last occurrence of a repeated key is the one that counts, so
// presence is decided as the decoder decides values.
func TestMissingHelloFieldFindsRepeatedKeys(t *testing.T) {
	h := helloReq("m1")
	b, _ := h.MarshalMsg(nil)
	n, rest, _ := msgp.ReadMapHeaderBytes(b)
	out := msgp.AppendMapHeader(nil, n+1)
	out = msgp.AppendString(out, "capabilities")
	out = msgp.AppendMapHeader(out, 0) // no runners here; the later one has them
	out = append(out, rest...)
	if missing, err := plane.MissingHelloField(out); err != nil || missing != "" {
		t.Errorf("repeated capabilities: %q %v, want none missing", missing, err)
	}
}

// A hello whose probed versions span lines (runsc --version prints two)
// is admitted, its record holding them on one line.
func TestHelloTakesMultilineProbeOutput(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{8})})
	body := helloReq("m1")
	runsc := "runsc version release-20240513.0\nspec: 1.1.0"
	body.Versions.Runsc = &runsc
	r := lastReply(t, p.Step(t0, plane.Hello{Auth: bearer, Req: 1, Body: body}))
	b, ok := r.Body.(wire.HelloResponse)
	if !ok || b.Reject != nil || b.WorkerID == nil {
		t.Fatalf("hello answered %d %+v", r.Status, r.Body)
	}
	if got := p.Snapshot().Workers[0].Versions.Runsc; got == nil || *got != "runsc version release-20240513.0 spec: 1.1.0" {
		t.Fatalf("stored runsc %v", got)
	}
	if runsc != "runsc version release-20240513.0\nspec: 1.1.0" {
		t.Fatal("the hello's own string was changed")
	}
}

// The plane's replies carry an empty collection as one, never as nil,
// for peers that decode commands as an array and config as a map.
func TestEmptyRepliesSendEmptyCollections(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{8})})
	hello := lastReply(t, p.Step(t0, plane.Hello{Auth: bearer, Req: 1, Body: helloReq("m1")})).Body.(wire.HelloResponse)
	if hello.Config == nil {
		t.Error("hello reply config is nil")
	}
	poll := lastReply(t, p.Step(t0, plane.Poll{Auth: bearer, Req: 2, Body: wire.PollRequest{WorkerID: *hello.WorkerID}})).Body.(wire.PollResponse)
	if poll.Commands == nil {
		t.Error("empty poll reply commands is nil")
	}
}
