//go:build unix

package relay

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/nymphd/nymph/relay/policy"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// memPlane answers every request in memory: 200 with the body's length.
type memPlane struct{}

func (memPlane) RoundTrip(r *http.Request) (*http.Response, error) {
	n, err := io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	body := fmt.Sprintf("len:%d", n)
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r, Header: http.Header{}}, nil
}

// memRelay is a relay with no prefix, only its frame logic and an
// in-memory upstream.
func memRelay() *Relay {
	base, _ := policy.ParseBase("http://127.0.0.1:1/")
	cfg := withDefaults(Config{})
	return &Relay{cfg: cfg, log: cfg.Logger, metrics: newMetrics(time.Time{}),
		up:   &upstream{transport: memPlane{}, base: base, token: func() string { return "t" }, timeout: cfg.UpstreamTimeout},
		hard: context.Background()}
}

// streamSource is a pump's view of a byte stream held in memory: running
// out of bytes mid-frame is what a stalled writer looks like.
type streamSource struct{ frameBody }

func (s *streamSource) Read(b []byte) (int, error) {
	n, err := s.frameBody.Read(b)
	switch {
	case n > 0 || err == nil:
		return n, nil
	case s.remain <= 0:
		return 0, io.EOF
	}
	return 0, errStalled
}

func (s *streamSource) await(call func() result, _ context.CancelCauseFunc, _ upstreamLimit, _ bool) (result, bool) {
	return call(), false
}

func (s *streamSource) forwarding() {}

func (s *streamSource) discard(buf []byte) error {
	for s.remain > 0 {
		if _, err := s.Read(buf); err != nil {
			return err
		}
	}
	return nil
}

// pumpStream runs the pump's frame loop over data and returns the reply
// frames it would write.
func pumpStream(rl *Relay, data []byte) [][]byte {
	src := &streamSource{frameBody{r: bytes.NewReader(data)}}
	var out [][]byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(src.r, hdr[:]); err != nil {
			return out // a partial header at the end stalls and is dropped
		}
		size := int64(binary.BigEndian.Uint32(hdr[:]))
		src.remain = size
		rep, send := rl.serveFrame(context.Background(), src, size, "")
		if !send {
			continue
		}
		b, err := rep.appendFrame(nil)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
}

func frameOf(p []byte) []byte { return frame.Append(nil, p) }

func oversizeHead(id string) []byte {
	size := uint32(frame.MaxPayload + 10)
	b := binary.BigEndian.AppendUint32(nil, size)
	return append(b, envPrefix(id)...)
}

// bigHead is an envelope whose head (headers) is over the relay's first
// read, so a frame cut short of it stalls inside the head.
func bigHead(t testing.TB, endpoint, id string) []byte {
	h := map[string]string{}
	for i := range 200 {
		h[fmt.Sprintf("X-LS-Pad-%03d", i)] = strings.Repeat("v", 40)
	}
	p, err := (&wire.RelayRequest{Endpoint: endpoint, ID: id, Headers: h, Body: []byte("b")}).MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// bodyFirst is an envelope with its keys in another order than nymph's:
// the body of n bytes first.
func bodyFirst(n int, endpoint, id string) []byte {
	p := msgp.AppendMapHeader(nil, 3)
	p = msgp.AppendBytes(msgp.AppendString(p, "body"), bytes.Repeat([]byte("b"), n))
	p = msgp.AppendString(msgp.AppendString(p, "endpoint"), endpoint)
	return msgp.AppendString(msgp.AppendString(p, "id"), id)
}

// envPrefix is the start of an envelope whose body never arrives.
func envPrefix(id string) []byte {
	p, _ := (&wire.RelayRequest{Endpoint: "/v1/daemon/poll", ID: id, Body: []byte{}}).MarshalMsg(nil)
	return p[:len(p)-2]
}

func TestStreamTable(t *testing.T) {
	ok := func(id string) []byte {
		p, _ := (&wire.RelayRequest{Endpoint: "/v1/daemon/poll", ID: id, Body: []byte("b")}).MarshalMsg(nil)
		return frameOf(p)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	type want struct {
		id     string
		status int
	}
	for _, tc := range []struct {
		name string
		data []byte
		want []want
	}{
		{"one", ok("a"), []want{{"a", 200}}},
		{"two back to back", cat(ok("a"), ok("b")), []want{{"a", 200}, {"b", 200}}},
		{"garbage frame then good", cat(frameOf([]byte("\xc1\xc1")), ok("b")), []want{{"", 400}, {"b", 200}}},
		{"empty frame then good", cat(frameOf(nil), ok("b")), []want{{"", 400}, {"b", 200}}},
		{"not a map", frameOf([]byte{0x93, 1, 2, 3}), []want{{"", 400}}},
		{"oversize with id, stalls", oversizeHead("big"), []want{{"big", 413}}},
		{"oversize, bare header, stalls", binary.BigEndian.AppendUint32(nil, frame.MaxPayload+1), []want{{"", 413}}},
		// The id comes after the headers: the refusal goes out raw.
		{"endpoint refused, stalls in the head", frameOf(bigHead(t, "/v1/admin", "y"))[:300], []want{{"", 400}}},
		{"endpoint allowed, stalls in the head", frameOf(bigHead(t, "/v1/daemon/poll", "z"))[:300], nil},
		{"body first, small", frameOf(bodyFirst(1000, "/v1/daemon/ack", "k1")), []want{{"k1", 200}}},
		// Its id is past the body, beyond what the relay holds: raw.
		{"body first, head over 64 KiB", frameOf(bodyFirst(100_000, "/v1/daemon/ack", "k2")), []want{{"", 400}}},
		{"partial header", []byte{0, 0}, nil},
		{"stalled body", ok("a")[:10], nil},
		{"endpoint refused", frameOf(envelope(t, "/v1/admin", "x", nil)), []want{{"x", 400}}},
		{"bad id", frameOf(envelope(t, "/v1/daemon/poll", "..", nil)), []want{{"", 400}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pumpStream(memRelay(), tc.data)
			if len(got) != len(tc.want) {
				t.Fatalf("%d replies, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				p, _, err := frame.Split(got[i])
				if err != nil {
					t.Fatal(err)
				}
				var gotID string
				var status int
				if w.id != "" {
					r := decodeReply(t, p)
					gotID, status = r.ID, int(r.Status)
				} else if w.status == 200 {
					status = 200
				} else {
					status = int(decodeRelayError(t, p).Status)
				}
				if gotID != w.id || status != w.status {
					t.Errorf("reply %d = id %q status %d, want %+v", i, gotID, status, w)
				}
			}
		})
	}
}

// allocCeiling is what one input may make the pump allocate beyond its own
// size: a head buffer, the HTTP exchange, a reply. A frame that announces
// 256 MiB or 4 GiB must not move it.
const allocCeiling = 4 << 20

func FuzzPump(f *testing.F) {
	f.Add(frameOf(envelope(f, "/v1/daemon/poll", "a", []byte("x"))))
	f.Add(oversizeHead("big"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x85})
	f.Add(frameOf([]byte{0x82, 0xa8, 'e', 'n', 'd', 'p', 'o', 'i', 'n', 't', 0xa1, '/', 0xa4, 'b', 'o', 'd', 'y', 0xc6, 0x7f, 0xff, 0xff, 0xff}))
	f.Add(frameOf([]byte{0x81, 0xa4, 'b', 'o', 'd', 'y', 0xc6, 0, 1, 0, 0}))
	rl := memRelay()
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		pumpStream(rl, data)
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(allocCeiling+4*len(data)) {
			t.Fatalf("allocated %d bytes for a %d-byte input", grew, len(data))
		}
	})
}

// A head that arrives a byte at a time is parsed a few times, not once
// per byte: each parse of a head of n headers makes about n allocations,
// so a parse per byte of a 60 KiB head would make tens of millions.
func TestDrippedHeadParsedAFewTimes(t *testing.T) {
	h := map[string]string{}
	for i := range 1500 {
		h[fmt.Sprintf("X-LS-Pad-%04d", i)] = strings.Repeat("v", 20)
	}
	body := bytes.Repeat([]byte("b"), 100<<10) // a frame over the head cap: the head is read in steps
	p, err := (&wire.RelayRequest{Endpoint: "/v1/daemon/ack", ID: "d1", Headers: h, Body: body}).MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	rl := memRelay()
	allocs := testing.AllocsPerRun(1, func() {
		src := &streamSource{frameBody{r: iotest.OneByteReader(bytes.NewReader(p)), remain: int64(len(p))}}
		if _, send := rl.serveFrame(context.Background(), src, int64(len(p)), ""); !send {
			t.Fatal("no reply")
		}
	})
	// A parse of the whole head makes some 3,000 allocations (the
	// headers map's keys and values), and forwarding a few thousand more:
	// 9,600 measured, where a parse per byte made 79 million.
	if limit := 10 * float64(len(h)); allocs > limit {
		t.Fatalf("%.0f allocations to read a %d-byte head a byte at a time, want at most %.0f", allocs, len(p)-len(body), limit)
	}
}
