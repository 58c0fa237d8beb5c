package frame

import (
	"fmt"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkDecoder feeds a stream of frames and takes them out; "copy" is
// the floor: a plain copy of the same bytes.
func BenchmarkDecoder(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		frames := max(1, (64<<10)/size) // ~64 KiB of frames per round
		var stream []byte
		for range frames {
			stream = Append(stream, make([]byte, size))
		}
		b.Run(fmt.Sprintf("%dB/decoder", size), func(b *testing.B) {
			var d Decoder
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				d.Feed(stream)
				for n := 0; n < frames; n++ {
					if _, ok, err := d.Next(); !ok || err != nil {
						b.Fatal("frame missing", err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("%dB/copy", size), func(b *testing.B) {
			dst := make([]byte, len(stream))
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, stream)
			}
		})
	}
}

func BenchmarkAppend(b *testing.B) {
	payload := make([]byte, 64)
	buf := make([]byte, 0, 256)
	b.SetBytes(int64(len(payload) + HeaderSize))
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], payload)
	}
}

func BenchmarkAppendMsgRelayRequest(b *testing.B) {
	req := &wire.RelayRequest{Endpoint: "/v1/daemon/poll", ID: "01JD8Z3ABCDEF-42", Body: make([]byte, 200)}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendMsg(buf[:0], req); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkReadEnvelope(b *testing.B) {
	req := &wire.RelayRequest{Endpoint: "/v1/daemon/poll", ID: "01JD8Z3ABCDEF-42", Body: make([]byte, 64<<10)}
	payload, _ := req.MarshalMsg(nil)
	head := payload[:128]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadEnvelope(head, len(payload)); err != nil {
			b.Fatal(err)
		}
	}
}
