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

// forget NAME picks the lost worker a label names, not the live one that
// came back under a new id with the same label; a label only a live
// worker has goes to the plane, whose 409 says why; a label two lost
// workers share picks neither.
func TestCtlForgetMatchesLostWorkersFirst(t *testing.T) {
	var deleted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == operator.PathWorkers:
			json.NewEncoder(w).Encode([]operator.Worker{
				{ID: "w-old", MachineID: "m-old", Label: "box", State: "lost"},
				{ID: "w-new", MachineID: "m-new", Label: "box", State: "active"},
				{ID: "w-live", MachineID: "m-live", Label: "solo", State: "active"},
				{ID: "w-a", MachineID: "m-a", Label: "twin", State: "lost"},
				{ID: "w-b", MachineID: "m-b", Label: "twin", State: "lost"},
			})
		case r.Method == http.MethodDelete:
			id := strings.TrimPrefix(r.URL.Path, "/v1/admin/workers/")
			deleted = append(deleted, id)
			if id != "w-old" {
				w.WriteHeader(http.StatusConflict)
				json.NewEncoder(w).Encode(operator.Error{Error: "worker " + id + " is active, not lost"})
				return
			}
			json.NewEncoder(w).Encode(operator.WorkerForgotten{WorkerID: id})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	forget := func(ref string) (int, string, string) {
		var out, errb bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
			signals: make(chan os.Signal)}
		c := &ctlRun{env: env, conn: ctlConn{server: srv.URL, token: "tok"}}
		return ctlForget(context.Background(), c, []string{ref}), out.String(), errb.String()
	}

	if code, out, errs := forget("box"); code != 0 || !strings.Contains(out, "forgot worker w-old") {
		t.Errorf("forget box: %d stdout %q stderr %q deleted %v, want w-old (the lost one) forgotten", code, out, errs, deleted)
	}
	deleted = nil
	if code, _, errs := forget("solo"); code == 0 || !strings.Contains(errs, "w-live is active, not lost") {
		t.Errorf("forget solo: %d stderr %q deleted %v, want the plane's refusal of the live w-live", code, errs, deleted)
	}
	deleted = nil
	if code, _, errs := forget("twin"); code != 1 || len(deleted) != 0 || !strings.Contains(errs, "no single worker") {
		t.Errorf("forget twin: %d stderr %q deleted %v, want no pick between two lost workers", code, errs, deleted)
	}
}
