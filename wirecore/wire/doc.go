// Package wire holds every message of nymph's daemon protocol "1" as typed
// Go structs with msgp-generated codecs, plus the relay envelope.
//
// It decides the byte layout: msgpack maps with string keys named exactly as
// the protocol writes them, which fields are omitted when empty, which decode
// msgpack nil, and how numbers are read leniently (any int or float). It also
// decides how a poll command's raw body becomes a typed directive (Dispatch).
//
// It does not decide what to do with a message: the daemon and control-plane
// state machines (wirecore/daemon, wirecore/plane) do that. It performs no I/O.
//
// Codecs live in *_gen.go files produced by `make gen` (go tool msgp); the
// few types whose decoding must be more forgiving than msgp's generated code
// (numbers, blobs, PayloadRef's two key spellings) have hand-written codecs in
// lenient.go and payload.go.
package wire

// ProtocolVersion is the value of HelloRequest.Versions.Protocol.
const ProtocolVersion = "1"

//go:generate go tool msgp -tests=false -file hello.go -o hello_gen.go
//go:generate go tool msgp -tests=false -file poll.go -o poll_gen.go
//go:generate go tool msgp -tests=false -file commands.go -o commands_gen.go
//go:generate go tool msgp -tests=false -file results.go -o results_gen.go
//go:generate go tool msgp -tests=false -file relay.go -o relay_gen.go
