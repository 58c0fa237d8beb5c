package planeserver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/nymphd/nymph/internal/strictwire"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// docPeer is a host written from docs/protocol.md ("Enrolment", "Request
// signatures", "Key rotation") alone: its own canonical string, header
// names, key id and bodies (another msgpack library), none of
// wirecore/identity or wirecore/wire, so serve is checked against the
// page, not against the code that wrote both sides.
type docPeer struct {
	ts    *testServer
	key   ed25519.PrivateKey
	nonce int
}

func (p *docPeer) pub(k ed25519.PrivateKey) string {
	return base64.RawURLEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
}

// keyID: "ed25519-" and the first 16 bytes of the SHA-256 of the raw key.
func (p *docPeer) keyID(k ed25519.PrivateKey) string {
	sum := sha256.Sum256(k.Public().(ed25519.PublicKey))
	return "ed25519-" + hex.EncodeToString(sum[:16])
}

// post signs body for path as the page says and sends it; extra headers
// (the join token, a new key's proof computed by proof) ride along.
func (p *docPeer) post(t *testing.T, path string, body map[string]any, extra map[string]string,
	proof func(canonical string) (string, string)) (int, []byte) {
	t.Helper()
	raw, err := msgpack.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	p.nonce++
	nonce := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("doc-peer-nonce%02d", p.nonce)))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	audience := strings.ToLower(p.ts.http.URL)
	sum := sha256.Sum256(raw)
	canonical := strings.Join([]string{"nymph-request-v1", "POST", path, hex.EncodeToString(sum[:]), ts, nonce, audience, p.keyID(p.key)}, "\n")
	req, err := http.NewRequest("POST", p.ts.http.URL+path, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-msgpack")
	req.Header.Set("X-LS-Key-Id", p.keyID(p.key))
	req.Header.Set("X-LS-Timestamp", ts)
	req.Header.Set("X-LS-Nonce", nonce)
	req.Header.Set("X-LS-Audience", audience)
	req.Header.Set("X-LS-Signature", base64.RawURLEncoding.EncodeToString(ed25519.Sign(p.key, []byte(canonical))))
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	if proof != nil {
		k, v := proof(canonical)
		req.Header.Set(k, v)
	}
	return p.ts.do(req)
}

// A host built from the page joins with a token, polls signed, rotates
// its key and polls with the new one; every answer is read by the strict
// decoder.
func TestAHostWrittenFromTheDocsJoinsSignsAndRotates(t *testing.T) {
	ts := trustServer(t, nil)
	var created operator.TokenCreated
	if st := ts.admin("POST", operator.PathTokens, operator.TokenRequest{TTLS: 600}, &created); st != 200 {
		t.Fatalf("mint: %d", st)
	}
	secret := created.Token[:strings.LastIndexByte(created.Token, '.')]
	_, key, _ := ed25519.GenerateKey(nil)
	p := &docPeer{ts: ts, key: key}
	hello := map[string]any{"machine_id": "doc-host", "label": "", "tags": []string{},
		"capabilities": map[string]any{"runners": []string{"process"}, "max_invocations": 1, "workdir": "/w"},
		"versions":     map[string]any{"daemon": "0.0.1", "protocol": "1"}, "public_key": p.pub(key)}
	st, b := p.post(t, "/v1/daemon/hello", hello, map[string]string{"X-LS-Enroll-Token": secret}, nil)
	resp := strict[strictwire.HelloResponse](t, "enrolling hello", b)
	if st != 200 || resp.Reject != nil || resp.KeyID == nil || *resp.KeyID != p.keyID(key) || resp.WorkerID == nil {
		t.Fatalf("enrolling hello: %d %+v", st, resp)
	}
	worker := *resp.WorkerID
	// It announced no extension, so none comes back: its config map is
	// the empty one protocol "1" always had.
	if len(resp.Config) != 0 {
		t.Fatalf("a peer that announced no extension got config %v", resp.Config)
	}
	poll := map[string]any{"worker_id": worker, "queue": "default", "timeout_s": 0, "cursor": nil, "invocations": []any{}}
	if st, b := p.post(t, "/v1/daemon/poll", poll, nil, nil); st != 200 {
		t.Fatalf("signed poll: %d %q", st, b)
	} else {
		strict[strictwire.PollResponse](t, "signed poll", b)
	}

	// Its running invocation cannot be cancelled: serve sends it no
	// cancel command (a kind it would not know) and says why.
	var inv operator.Invocation
	if st := ts.admin("POST", operator.PathInvocations, operator.RunRequest{Queue: "default",
		Function: wire.Function{Module: "m", Qualname: "f"}, RunConfig: wire.RunConfig{Runner: "process"}}, &inv); st != 200 {
		t.Fatalf("run: %d", st)
	}
	if st, b := p.post(t, "/v1/daemon/poll", poll, nil, nil); st != 200 {
		t.Fatalf("poll for the run: %d %q", st, b)
	} else if got := strict[strictwire.PollResponse](t, "poll for the run", b); len(got.Commands) != 1 || got.Commands[0].Kind != wire.KindRun {
		t.Fatalf("poll for the run: %+v", got)
	}
	if st := ts.admin("POST", strings.Replace(operator.PathKill, "{id}", inv.ID, 1), nil, nil); st != 409 {
		t.Fatalf("kill of a running invocation on a plain protocol 1 peer: %d, want 409", st)
	}
	if st, b := p.post(t, "/v1/daemon/poll", poll, nil, nil); st != 200 {
		t.Fatalf("poll after the kill: %d %q", st, b)
	} else if got := strict[strictwire.PollResponse](t, "poll after the kill", b); len(got.Commands) != 0 {
		t.Fatalf("a plain peer was sent %+v", got.Commands)
	}

	_, next, _ := ed25519.GenerateKey(nil)
	rotation := map[string]any{"worker_id": worker, "new_public_key": p.pub(next), "old_key_id": p.keyID(key)}
	st, b = p.post(t, "/v1/daemon/keys", rotation, nil, func(canonical string) (string, string) {
		return "X-LS-New-Key-Signature", base64.RawURLEncoding.EncodeToString(ed25519.Sign(next, []byte(canonical)))
	})
	rot := strict[strictwire.KeyRotationResponse](t, "key rotation", b)
	if st != 200 || rot.Reject != nil || rot.KeyID != p.keyID(next) {
		t.Fatalf("rotation: %d %+v", st, rot)
	}
	p.key = next
	if st, b := p.post(t, "/v1/daemon/poll", poll, nil, nil); st != 200 {
		t.Fatalf("poll with the new key: %d %q", st, b)
	}
}
