package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nymphd/nymph/hostio/tlsca"
)

// runCtlWith runs `nymph ctl` with the environment env.
func runCtlWith(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	e := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return env[k] }, signals: make(chan os.Signal)}
	code := runCtl(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// serve speaks TLS by default; ctl trusts it with the CA file serve
// printed, and `ctl ca` shows that CA.
func TestServeTLSAndCtlCA(t *testing.T) {
	s := startServe(t)
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("serve listens on %s, want https", s.url)
	}
	a, err := tlsca.Load(filepath.Dir(s.caFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.stdout.String(), "fingerprint "+a.Fingerprint()) || !strings.Contains(s.stdout.String(), s.caFile) {
		t.Errorf("serve's start does not name its CA:\n%s", s.stdout.String())
	}
	env := map[string]string{"NYMPH_SERVER": s.url, "NYMPH_ADMIN_TOKEN": s.admin, "NYMPH_CA_FILE": s.caFile}
	code, out, errText := runCtlWith(t, env, "ca")
	if code != 0 || !strings.Contains(out, "ca_fingerprint: "+a.Fingerprint()) || !strings.Contains(out, "ca_file:        "+s.caFile) {
		t.Fatalf("ctl ca: exit %d, %q %q", code, out, errText)
	}
	code, out, _ = runCtlWith(t, env, "ca", "--pem")
	if file, _ := os.ReadFile(s.caFile); code != 0 || out != string(file) {
		t.Errorf("ctl ca --pem: exit %d, %q, want the ca.crt", code, out)
	}
	if code, _, errText := runCtlWith(t, env, "workers"); code != 0 {
		t.Errorf("ctl workers: exit %d, %s", code, errText)
	}
	// A join token pins this CA.
	if code, out, errText := runCtlWith(t, env, "token"); code != 0 || !strings.Contains(out, "."+a.Fingerprint()) {
		t.Errorf("ctl token: exit %d, %q %q, want a token pinning %s", code, out, errText, a.Fingerprint())
	}

	// Without the CA file the system's roots refuse serve's certificate,
	// and ctl says what to pass.
	delete(env, "NYMPH_CA_FILE")
	code, _, errText = runCtlWith(t, env, "workers")
	if code == 0 || !strings.Contains(errText, "pass --ca-file") || !strings.Contains(errText, "tls/ca.crt") {
		t.Errorf("ctl without the CA: exit %d, %q", code, errText)
	}
	// A plain http client gets no answer it could mistake for serve's.
	if resp, err := http.Get("http" + strings.TrimPrefix(s.url, "https") + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("serve answered plain HTTP on its TLS port")
		}
	}
}

// --insecure-http serves plain HTTP on loopback and is refused elsewhere.
func TestServeInsecureHTTP(t *testing.T) {
	s := startServe(t, "--insecure-http")
	if !strings.HasPrefix(s.url, "http://") {
		t.Fatalf("serve listens on %s, want http", s.url)
	}
	resp, err := http.Get(s.url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("plain healthz: %v", err)
	}
	resp.Body.Close()
	if _, err := os.Stat(filepath.Dir(s.caFile)); !os.IsNotExist(err) {
		t.Errorf("--insecure-http made a TLS directory: %v", err)
	}
	code, _, stderr := runServeOnce(t, "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "0.0.0.0:0", "--insecure-no-daemon-auth", "--insecure-http")
	if code != 2 || !strings.Contains(stderr, "--insecure-http: --listen 0.0.0.0:0 is not a loopback address") {
		t.Errorf("non-loopback: exit %d, %q", code, stderr)
	}
}

// `serve status` reads the CA and the certificate from the data
// directory alone.
func TestServeStatus(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if code, _, stderr := runServeOnce(t, "--data-dir", data, "--san", "plane.example", "--public-url", "https://cp.example:8443"); code != 0 {
		t.Fatalf("serve: exit %d, %s", code, stderr)
	}
	var out, errb strings.Builder
	env := &cliEnv{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := runServe(context.Background(), env, []string{"status", "--data-dir", data}); code != 0 {
		t.Fatalf("status: exit %d, %s", code, errb.String())
	}
	a, err := tlsca.Load(tlsDir(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ca_fingerprint:   " + a.Fingerprint(), "ca_file:          " + filepath.Join(data, "tls", "ca.crt"),
		"server_names:     localhost, cp.example, plane.example, 127.0.0.1, ::1", "server_not_after: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	errb.Reset()
	if code := runServe(context.Background(), env, []string{"status", "--data-dir", t.TempDir()}); code != 1 || !strings.Contains(errb.String(), "first start") {
		t.Errorf("status of a data dir without TLS: exit %d, %q", code, errb.String())
	}
}

func TestCertNames(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		listen, public string
		sans, want     []string
	}{
		{"127.0.0.1:8383", "", nil, []string{"127.0.0.1"}},
		{"0.0.0.0:8383", "https://cp.example/x", []string{"10.0.0.5"}, []string{host, "cp.example", "10.0.0.5"}},
		{":8383", "", nil, []string{host}},
		{"[::]:8383", "", nil, []string{host}},
	} {
		if got := certNames(tc.listen, tc.public, tc.sans); !slices.Equal(got, tc.want) {
			t.Errorf("certNames(%q, %q, %v) = %v, want %v", tc.listen, tc.public, tc.sans, got, tc.want)
		}
	}
}

// A daemon may sign for any name serve's certificate carries, at the
// public URL's scheme and port.
func TestCertificateOrigins(t *testing.T) {
	got := certificateOrigins("https://Plane.Example:8383/base", []string{"localhost", "plane.example", "127.0.0.1", "::1"})
	want := []string{"https://localhost:8383", "https://plane.example:8383", "https://127.0.0.1:8383", "https://[::1]:8383"}
	if !slices.Equal(got, want) {
		t.Fatalf("origins %q, want %q", got, want)
	}
	got = certificateOrigins("https://plane.example", []string{"plane.example", "::1"})
	if want := []string{"https://plane.example", "https://[::1]"}; !slices.Equal(got, want) {
		t.Fatalf("without a port: %q, want %q", got, want)
	}
}
