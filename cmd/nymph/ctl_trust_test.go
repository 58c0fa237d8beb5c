package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
)

// runTrustVerb runs one trust verb against a server answering as serve
// does, and returns its status, stdout and stderr, and the requests made.
func runTrustVerb(t *testing.T, verb func(context.Context, *ctlRun, []string) int, args ...string) (int, string, string, []string) {
	t.Helper()
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		reply := func(v any) { json.NewEncoder(w).Encode(v) }
		switch r.Method + " " + r.URL.Path {
		case "POST " + operator.PathTokens:
			var in operator.TokenRequest
			json.NewDecoder(r.Body).Decode(&in)
			if in.TTLS != 600 || in.Queue != "gpu" || strings.Join(in.Tags, ",") != "site=lab,rack=4" {
				w.WriteHeader(400)
				reply(operator.Error{Error: "unexpected request"})
				return
			}
			reply(operator.TokenCreated{ID: "t1", ExpiresAt: time.Now().Add(10 * time.Minute),
				Token: "s.f", JoinCommand: "nymph daemon join --server https://cp.example --token s.f"})
		case "GET " + operator.PathTokens:
			reply([]operator.Token{{ID: "t1", State: operator.TokenRedeemed, Tags: []string{"site=lab"}, WorkerID: "w1"}})
		case "GET " + operator.PathWorkers:
			reply([]operator.Worker{{ID: "w1", MachineID: "box", State: "active"}})
		case "POST /v1/admin/workers/w1/revoke-key":
			reply(operator.KeyRevoked{WorkerID: "w1", KeyIDs: []string{"ed25519-aa"}})
		default:
			reply(operator.CommandAccepted{CommandID: "c1", WorkerID: "w1"})
		}
	}))
	t.Cleanup(srv.Close)
	var out, errb bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
		signals: make(chan os.Signal)}
	c := &ctlRun{env: env, conn: ctlConn{server: srv.URL, token: "tok"}}
	code := verb(context.Background(), c, args)
	return code, out.String(), errb.String(), seen
}

func TestCtlTokenPrintsTheJoinLineAlone(t *testing.T) {
	code, out, errs, _ := runTrustVerb(t, ctlToken, "--ttl", "10m", "--queue", "gpu", "--tag", "site=lab", "--tag", "rack=4")
	if code != 0 || out != "nymph daemon join --server https://cp.example --token s.f\n" {
		t.Fatalf("token: %d stdout %q stderr %q", code, out, errs)
	}
	if !strings.Contains(errs, "expires at") {
		t.Fatalf("the expiry is not on stderr: %q", errs)
	}
	if code, _, _, _ := runTrustVerb(t, ctlToken, "--tag", "nokey"); code != 2 {
		t.Fatalf("a tag without =: %d", code)
	}
}

func TestCtlTokensRevokeRotate(t *testing.T) {
	code, out, _, _ := runTrustVerb(t, ctlTokens)
	if code != 0 || !strings.Contains(out, "t1") || !strings.Contains(out, "redeemed") || !strings.Contains(out, "site=lab") {
		t.Fatalf("tokens: %d %q", code, out)
	}
	code, out, _, seen := runTrustVerb(t, ctlRevoke, "box")
	if code != 0 || !strings.Contains(out, "revoked ed25519-aa of worker w1") || seen[len(seen)-1] != "POST /v1/admin/workers/w1/revoke-key" {
		t.Fatalf("revoke: %d %q %v", code, out, seen)
	}
	code, out, _, seen = runTrustVerb(t, ctlRotateKey, "w1")
	if code != 0 || !strings.Contains(out, "rotate_key") || seen[len(seen)-1] != "POST /v1/admin/workers/w1/rotate-key" {
		t.Fatalf("rotate-key: %d %q %v", code, out, seen)
	}
}
