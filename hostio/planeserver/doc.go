// Package planeserver is `nymph serve`'s HTTP side: it serves every daemon
// route of protocol "1", /healthz and the operator API, and runs the loop
// that owns the wirecore/plane state machine.
//
// It decides the HTTP surface: bearer checks (daemon bearer, relay token
// carrying X-LS-Daemon-Authorization, admin bearer), request size limits,
// body encodings (msgpack, JSON for exec results and operator routes, raw
// octets for log chunks), and the order of durability and replies: a
// plane.Persist batch reaches Store.Apply before any reply of the same
// step is written.
//
// It does not decide what a request means — the plane core does — nor how
// records are kept (a Store: hostio/sqlstore on disk, MemStore in tests)
// or how payload blobs are kept and signed (a BlobStore).
package planeserver
