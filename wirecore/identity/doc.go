// Package identity holds the formats of a daemon's identity on the wire:
// its Ed25519 key and key id, the signature every request carries in
// X-LS-* headers (the canonical string, the headers, their parser and
// the verification), the replay window and nonce memory a verifier
// keeps, and the join token that enrolls a key while pinning the control
// plane's CA.
//
// It decides what is signed, how it is encoded and what a verifier must
// refuse. It does not decide who may act for which worker (the plane core
// does), where keys live on disk, or where randomness and the clock come
// from: callers pass the time, the nonce and the key. It is pure, so the
// daemon, the plane and a serverless handler sign and verify alike.
package identity
