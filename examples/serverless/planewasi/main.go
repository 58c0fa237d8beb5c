//go:build wasip1

// Command planewasi is examples/serverless built as a WASI preview 1
// reactor (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared): the
// host calls _initialize once, then the exports below, with the request
// and the reply as JSON in linear memory.
//
//	nymph_alloc(size u32) → ptr u32
//	  a buffer of size bytes for the host to write the request into
//	nymph_handle(ptr u32, size u32) → u64
//	  handles the request in that buffer (which it then drops) and returns
//	  ptr<<32 | size of the reply, valid until the next nymph_handle
//
// The request is {state, nowMs, method, path, authorization, body,
// tokens: {daemon, admin}}, the reply {state, status, contentType, body,
// parked, retryAfterS?} or {error}; body is base64 (JSON's []byte), state the stored
// JSON state serverless.Handle returns ("" for a fresh plane). The host stores the
// returned state before it sends the answer; parked says a poll found
// nothing. Linear memory may grow during a call: read it afresh after.
package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"
	"unsafe"

	"github.com/nymphd/nymph/examples/serverless"
)

// main is not run in a reactor; a main package needs one all the same.
func main() {}

// Go's GC does not know the host holds a pointer into its memory, so
// the buffers the host reads or writes live in these until they are done.
var (
	request []byte // from nymph_alloc until nymph_handle
	reply   []byte // from nymph_handle until the next one
)

// envelope is the request as the host writes it.
type envelope struct {
	State         string            `json:"state"`
	NowMs         int64             `json:"nowMs"`
	Method        string            `json:"method"`
	Path          string            `json:"path"`
	Authorization string            `json:"authorization"`
	Body          []byte            `json:"body"`
	Tokens        serverless.Tokens `json:"tokens"` // {daemon, admin}: encoding/json matches field names in any case
}

// answer is the reply to a request Handle took.
type answer struct {
	State       string `json:"state"`
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Body        []byte `json:"body"`
	Parked      bool   `json:"parked"`
	RetryAfterS int    `json:"retryAfterS,omitempty"`
}

// The exports' Go names are exported too: staticcheck does not take
// //go:wasmexport for a use.

//go:wasmexport nymph_alloc
func NymphAlloc(size uint32) uint32 {
	request = make([]byte, size)
	return addr(request)
}

//go:wasmexport nymph_handle
func NymphHandle(ptr, size uint32) uint64 {
	out, err := step(ptr, size)
	if err != nil {
		out, _ = json.Marshal(struct {
			Error string `json:"error"`
		}{err.Error()})
	}
	request, reply = nil, out
	return uint64(addr(reply))<<32 | uint64(len(reply))
}

func step(ptr, size uint32) ([]byte, error) {
	// Only the buffer nymph_alloc handed out is read: a pointer from the
	// host is never turned into memory Go did not give it.
	if request == nil || ptr != addr(request) || int(size) > len(request) {
		return nil, fmt.Errorf("nymph_handle(%#x, %d): not the buffer nymph_alloc returned", ptr, size)
	}
	var env envelope
	if err := json.Unmarshal(request[:size], &env); err != nil {
		return nil, fmt.Errorf("nymph_handle: decode request: %w", err)
	}
	req := serverless.Request{Method: env.Method, Path: env.Path, Authorization: env.Authorization, Body: env.Body}
	r, err := serverless.Handle([]byte(env.State), time.UnixMilli(env.NowMs), req, env.Tokens, rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("nymph_handle %s %s: %w", req.Method, req.Path, err)
	}
	out, err := json.Marshal(answer{string(r.State), r.Status, r.ContentType, r.Body, r.Parked, r.RetryAfterS})
	if err != nil {
		return nil, fmt.Errorf("nymph_handle %s %s: encode reply: %w", req.Method, req.Path, err)
	}
	return out, nil
}

// addr is where b starts in linear memory (wasm32: it fits a u32).
func addr(b []byte) uint32 {
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
