//go:build js && wasm

// Command planewasm is examples/serverless built for GOOS=js GOARCH=wasm:
// it exports one function to JavaScript and waits for calls.
//
//	nymphPlaneHandle(state, nowMs, method, path, headers, body, tokens)
//	  → {state, status, contentType, body, parked, retryAfterS} or {error}
//
// state is the stored JSON state Handle returns ("" for a fresh plane), headers
// an object of lower-case names (Node's req.headers), body a Uint8Array,
// tokens {daemon, admin}. The caller stores the returned state before it
// sends the answer; parked says a poll found nothing.
package main

import (
	"crypto/rand"
	"fmt"
	"syscall/js"
	"time"

	"github.com/nymphd/nymph/examples/serverless"
)

func main() {
	js.Global().Set("nymphPlaneHandle", js.FuncOf(handle))
	select {} // the exported function runs on calls from JavaScript
}

func handle(_ js.Value, args []js.Value) any {
	if len(args) != 7 {
		return map[string]any{"error": fmt.Sprintf("nymphPlaneHandle: %d arguments, want 7", len(args))}
	}
	body := make([]byte, args[5].Get("length").Int())
	js.CopyBytesToGo(body, args[5])
	req := serverless.Request{
		Method:        args[2].String(),
		Path:          args[3].String(),
		Authorization: str(args[4].Get("authorization")),
		Body:          body,
	}
	tokens := serverless.Tokens{Daemon: str(args[6].Get("daemon")), Admin: str(args[6].Get("admin"))}
	now := time.UnixMilli(int64(args[1].Float()))
	r, err := serverless.Handle([]byte(args[0].String()), now, req, tokens, rand.Reader)
	if err != nil {
		return map[string]any{"error": fmt.Sprintf("nymphPlaneHandle %s %s: %v", req.Method, req.Path, err)}
	}
	out := js.Global().Get("Uint8Array").New(len(r.Body))
	js.CopyBytesToJS(out, r.Body)
	return map[string]any{
		"state": string(r.State), "status": r.Status, "contentType": r.ContentType,
		"body": out, "parked": r.Parked, "retryAfterS": r.RetryAfterS,
	}
}

// str is a JavaScript string's value, "" for anything else (undefined).
func str(v js.Value) string {
	if v.Type() != js.TypeString {
		return ""
	}
	return v.String()
}
