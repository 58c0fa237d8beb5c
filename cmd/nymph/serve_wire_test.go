package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/opclient"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/internal/strictwire"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// liveServe is `nymph serve` running in this process on a free port.
type liveServe struct {
	t      *testing.T
	url    string // https://ADDR (http:// with --insecure-http), as serve prints it
	admin  string
	caFile string // DATA-DIR/tls/ca.crt
	http   *http.Client
	stdout *testkit.SyncBuffer
}

var listening = regexp.MustCompile(`listening on (https?://[^ ]+) `)

// startServe runs runServe with args (plus a free loopback port, a memory
// store, a data directory and an admin token) until the test ends.
func startServe(t *testing.T, args ...string) *liveServe {
	t.Helper()
	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(adminFile, []byte("admin-secret-w\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb testkit.SyncBuffer // written by serve's goroutine
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(string) string { return "" }, signals: make(chan os.Signal)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, env, append([]string{"--listen", "127.0.0.1:0", "--store", "memory",
			"--data-dir", filepath.Join(dir, "data"), "--admin-token-file", adminFile}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			caFile := filepath.Join(dir, "data", "tls", tlsca.CAFile)
			cfg, err := tlsca.ClientConfig(caFile)
			if err != nil {
				cfg = nil // --insecure-http: no CA
			}
			return &liveServe{t: t, url: m[1], admin: "admin-secret-w", caFile: caFile, stdout: &out,
				http: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}}
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s %s", out.String(), errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *liveServe) post(path string, body []byte, hdr ...string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest("POST", s.url+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", wire.ContentTypeMsgpack)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, b
}

func daemonHello(machine string) []byte {
	one, ver := "1", "0.1.0"
	b, _ := (&wire.HelloRequest{MachineID: machine, Label: machine, Tags: []string{},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, Workdir: "/tmp"},
		Versions:     wire.Versions{Daemon: &ver, Protocol: &one}}).MarshalMsg(nil)
	return b
}

// streamedExec says hello, queues a streamed exec as `nymph ctl exec` does,
// and returns its body as a strictly typed daemon reads it.
func (s *liveServe) streamedExec(hdr ...string) *strictwire.Exec {
	s.t.Helper()
	status, b := s.post(wire.PathHello, daemonHello("m1"), hdr...)
	hello := &strictwire.HelloResponse{}
	if err := strictwire.Decode(b, hello); err != nil || status != 200 || hello.WorkerID == nil {
		s.t.Fatalf("hello: %d %v %q", status, err, b)
	}
	ops, err := opclient.NewWithCA(s.url, s.admin, s.caFile)
	if err != nil {
		s.t.Fatal(err)
	}
	acc, err := ops.Exec(context.Background(), *hello.WorkerID, operator.ExecRequest{Command: "uname -a", Stream: true})
	if err != nil {
		s.t.Fatal(err)
	}
	poll, _ := (&wire.PollRequest{WorkerID: *hello.WorkerID, TimeoutS: 0}).MarshalMsg(nil)
	status, b = s.post(wire.PathPoll, poll, hdr...)
	resp := &strictwire.PollResponse{}
	if err := strictwire.Decode(b, resp); err != nil || status != 200 || len(resp.Commands) != 1 {
		s.t.Fatalf("poll: %d %v %q", status, err, b)
	}
	body, err := strictwire.DecodeBody(resp.Commands[0])
	if err != nil {
		s.t.Fatalf("a strictly typed daemon skips the exec: %v", err)
	}
	ex := body.(*strictwire.Exec)
	if ex.ExecID != acc.ExecID || ex.Log == nil {
		s.t.Fatalf("exec %+v, want %s streamed", ex, acc.ExecID)
	}
	return ex
}

// serve hands a streamed exec an absolute stdout_url: its --public-url,
// else the address it listens on.
func TestServeStdoutURLIsAbsolute(t *testing.T) {
	s := startServe(t)
	ex := s.streamedExec()
	if want := s.url + wire.PathExecChunk(ex.ExecID); ex.Log.StdoutURL != want {
		t.Errorf("without --public-url: stdout_url %q, want %q", ex.Log.StdoutURL, want)
	}
	if status, b := s.post(strings.TrimPrefix(ex.Log.StdoutURL, s.url), []byte("out")); status != 200 {
		t.Errorf("chunk to the stdout_url: %d %q", status, b)
	}

	s = startServe(t, "--public-url", "https://plane.example:8443/nymph/")
	ex = s.streamedExec()
	if want := "https://plane.example:8443/nymph" + wire.PathExecChunk(ex.ExecID); ex.Log.StdoutURL != want {
		t.Errorf("with --public-url: stdout_url %q, want %q", ex.Log.StdoutURL, want)
	}
}

// --trust-relay-daemons: a relay's token alone (a raw relay frame, which
// has no room for the daemon's bearer) is a daemon's credential only when
// serve is told so.
func TestServeTrustRelayDaemons(t *testing.T) {
	dir := t.TempDir()
	daemonTok := filepath.Join(dir, "daemon.token")
	relayTok := filepath.Join(dir, "relay.token")
	for p, tok := range map[string]string{daemonTok: "daemon-secret-w\n", relayTok: "relay-secret-w\n"} {
		if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokens := []string{"--token-file", daemonTok, "--relay-token-file", relayTok}
	relayed := []string{"Authorization", "Bearer relay-secret-w"}

	s := startServe(t, tokens...)
	status, b := s.post(wire.PathHello, daemonHello("m1"), relayed...)
	e := &strictwire.ErrorBody{}
	if err := strictwire.Decode(b, e); err != nil || status != 401 || !strings.Contains(e.Error, "--trust-relay-daemons") {
		t.Errorf("without the flag: %d %v %+v, want 401 naming --trust-relay-daemons", status, err, e)
	}

	s = startServe(t, append(tokens, "--trust-relay-daemons")...)
	s.streamedExec(relayed...)
	if status, b := s.post(wire.PathHello, daemonHello("m2"), "Authorization", "Bearer relay-secret-w", "X-LS-Daemon-Authorization", "Bearer wrong"); status != 401 {
		t.Errorf("with the flag, a wrong daemon bearer: %d %q, want 401", status, b)
	}
	if status, b := s.post(wire.PathHello, daemonHello("m3"), "Authorization", "Bearer nope"); status != 401 {
		t.Errorf("with the flag, a wrong relay token: %d %q, want 401", status, b)
	}
}

// The presign reply of serve's own blob store, as a strictly typed daemon
// reads it: expiresAt an integer, headers a map.
func TestServePresignFitsTheProtocolTypes(t *testing.T) {
	s := startServe(t)
	b := msgp.AppendMapHeader(nil, 2)
	b = msgp.AppendString(msgp.AppendString(b, "op"), "put")
	b = msgp.AppendString(msgp.AppendString(b, "key"), "job1/args.msgpack")
	status, body := s.post("/v1/namespaces/default/payloads/presign", b)
	p := &strictwire.PresignResponse{}
	if err := strictwire.Decode(body, p); err != nil || status != 200 || !strings.HasPrefix(p.URL, s.url+"/") ||
		p.Method != "PUT" || p.Headers == nil || p.ExpiresAt < time.Now().Unix() {
		t.Errorf("presign: %d %v %+v", status, err, p)
	}
}
