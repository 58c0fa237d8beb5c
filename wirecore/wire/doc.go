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
// Codecs live in *_gen.go files produced by `make gen`: go tool msgp, run
// through gen/codecs, which also makes decoding into a reused value keep the
// strings it already holds (reuse.go). The few types whose decoding must be
// more forgiving than msgp's generated code (numbers, blobs, PayloadRef's two
// key spellings) have hand-written codecs in lenient.go and payload.go.
//
// Decoding (UnmarshalMsg) skips unknown keys and overwrites only the keys
// present in the input: decode into a zero value, or into a reused value
// only when every message carries every key it needs (nymph's encoder
// writes all non-optional keys). A reused value keeps its slices' capacity
// and the strings that did not change, so steady-state decoding allocates
// nothing. Arrays and maps announcing more than 65,536 entries are refused
// before anything is allocated (the //msgp:limit directives).
//
// docs/protocol.md describes the wire format for implementers of the other
// side; the golden vectors in testdata/ pin the bytes.
package wire

// ProtocolVersion is the value of HelloRequest.Versions.Protocol.
const ProtocolVersion = "1"

//go:generate go run ../../gen/codecs -file hello.go -o hello_gen.go
//go:generate go run ../../gen/codecs -file poll.go -o poll_gen.go
//go:generate go run ../../gen/codecs -file commands.go -o commands_gen.go
//go:generate go run ../../gen/codecs -file results.go -o results_gen.go
//go:generate go run ../../gen/codecs -file relay.go -o relay_gen.go
