package tlsca

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ensure(t *testing.T, dir string, sans []string, now time.Time) *Authority {
	t.Helper()
	a, err := Ensure(dir, sans, now)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tlsDir is a directory Ensure creates: a test's own is 0755.
func tlsDir(t *testing.T) string { return filepath.Join(t.TempDir(), "tls") }

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestEnsureCreatesThenLoads(t *testing.T) {
	dir := tlsDir(t)
	a := ensure(t, dir, []string{"plane.example", "192.0.2.7", "[2001:db8::1]", "0.0.0.0", ""}, start)
	if !a.CreatedCA() || a.Issued() == "" {
		t.Fatalf("first start: created CA %v, issued %q", a.CreatedCA(), a.Issued())
	}
	for file, want := range map[string]os.FileMode{CAFile: 0o644, CAKeyFile: 0o600, ServerCertFile: 0o644, ServerKeyFile: 0o600} {
		if got := mode(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s: mode %04o, want %04o", file, got, want)
		}
	}
	if got := mode(t, dir); got != 0o700 {
		t.Errorf("dir: mode %04o, want 0700", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Errorf("dir holds %d entries, want the 4 files (no temporary left)", len(entries))
	}
	want := []string{"localhost", "plane.example", "127.0.0.1", "::1", "192.0.2.7", "2001:db8::1"}
	if got := a.Names(); !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	ca := a.CA()
	if !ca.IsCA || ca.NotAfter.Sub(start) < 9*365*24*time.Hour {
		t.Errorf("CA: IsCA %v, ends %v", ca.IsCA, ca.NotAfter)
	}
	if len(a.Fingerprint()) != 64 {
		t.Errorf("fingerprint %q", a.Fingerprint())
	}

	// Later starts keep both.
	again := ensure(t, dir, []string{"plane.example"}, start.Add(24*time.Hour))
	if again.CreatedCA() || again.Issued() != "" || again.Fingerprint() != a.Fingerprint() ||
		!bytes.Equal(again.Leaf().Raw, a.Leaf().Raw) {
		t.Errorf("second start: created %v, issued %q, same CA %v", again.CreatedCA(), again.Issued(), again.Fingerprint() == a.Fingerprint())
	}
	loaded, err := Load(dir)
	if err != nil || loaded.Fingerprint() != a.Fingerprint() || !slices.Equal(loaded.Names(), want) {
		t.Fatalf("Load: %v", err)
	}
}

func TestEnsureReissuesKeepingTheCA(t *testing.T) {
	dir := tlsDir(t)
	a := ensure(t, dir, []string{"plane.example"}, start)

	b := ensure(t, dir, []string{"other.example"}, start.Add(time.Hour))
	if b.Fingerprint() != a.Fingerprint() || b.CreatedCA() {
		t.Fatal("a new SAN changed the CA")
	}
	if !strings.Contains(b.Issued(), "other.example") || !slices.Contains(b.Names(), "other.example") {
		t.Errorf("new SAN: issued %q, names %v", b.Issued(), b.Names())
	}

	end := b.Leaf().NotAfter
	c := ensure(t, dir, []string{"other.example"}, end.Add(-RenewBefore-time.Hour))
	if c.Issued() != "" {
		t.Errorf("31 days before the end: issued %q", c.Issued())
	}
	d := ensure(t, dir, []string{"other.example"}, end.Add(-RenewBefore+time.Hour))
	if !strings.Contains(d.Issued(), "ends on") || !d.Leaf().NotAfter.After(end) || d.Fingerprint() != a.Fingerprint() {
		t.Errorf("29 days before the end: issued %q, ends %v", d.Issued(), d.Leaf().NotAfter)
	}
}

// serveTLS answers TLS handshakes with a's configuration on loopback.
func serveTLS(t *testing.T, a *Authority) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", a.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(addr, serverName string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = serverName
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		return errors.New("not TLS 1.3")
	}
	_, err = c.Read(make([]byte, 2))
	return err
}

func TestClientConfig(t *testing.T) {
	a := ensure(t, tlsDir(t), []string{"plane.example"}, time.Now())
	addr := serveTLS(t, a)
	cfg, err := ClientConfig(a.CAPath())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InsecureSkipVerify || cfg.MinVersion != tls.VersionTLS13 {
		t.Fatalf("config: skip %v, min %x", cfg.InsecureSkipVerify, cfg.MinVersion)
	}
	for _, name := range []string{"127.0.0.1", "localhost", "plane.example"} {
		if err := dial(addr, name, cfg); err != nil {
			t.Errorf("dial as %s: %v", name, err)
		}
	}

	// A name the certificate lacks: refused, with the --san to add.
	err = dial(addr, "elsewhere.example", cfg)
	if err == nil || !strings.Contains(Explain(err).Error(), "--san elsewhere.example") {
		t.Errorf("missing SAN: %v", Explain(err))
	}

	// Another serve's CA: refused, with the CA file to pass.
	other := ensure(t, tlsDir(t), nil, time.Now())
	wrong, err := ClientConfig(other.CAPath())
	if err != nil {
		t.Fatal(err)
	}
	err = dial(addr, "127.0.0.1", wrong)
	var untrusted *UntrustedError
	if !errors.As(Explain(err), &untrusted) || !strings.Contains(untrusted.Error(), "--ca-file") {
		t.Errorf("wrong CA: %v", Explain(err))
	}

	// The system roots do not know serve's CA.
	sys, err := ClientConfig("")
	if err != nil || sys.RootCAs != nil {
		t.Fatalf("system roots: %v", err)
	}
	if err := dial(addr, "127.0.0.1", sys); err == nil {
		t.Error("system roots trusted serve's private CA")
	}

	// A client below TLS 1.3 is refused by the server.
	old := &tls.Config{RootCAs: x509.NewCertPool(), MaxVersion: tls.VersionTLS12}
	old.RootCAs.AddCert(a.CA())
	if err := dial(addr, "127.0.0.1", old); err == nil {
		t.Error("a TLS 1.2 client was served")
	}
}

func TestClientConfigFiles(t *testing.T) {
	dir := tlsDir(t)
	for name, data := range map[string]string{"empty": "", "garbage": "not pem", "key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(data), 0o644)
		if _, err := ClientConfig(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ClientConfig(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
}

func TestExpired(t *testing.T) {
	dir := tlsDir(t)
	// Issued 500 days ago: the server certificate ended 103 days ago.
	a := ensure(t, dir, nil, time.Now().Add(-500*24*time.Hour))
	addr := serveTLS(t, a)
	cfg, _ := ClientConfig(a.CAPath())
	err := dial(addr, "127.0.0.1", cfg)
	if err == nil || !strings.Contains(Explain(err).Error(), "expired") {
		t.Errorf("expired: %v", Explain(err))
	}
	p, _ := NewPinned(a.Fingerprint())
	if err := dial(addr, "127.0.0.1", p.Config("127.0.0.1")); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("pinned, expired: %v", err)
	}
	// The next start issues a new one under the same CA.
	b := ensure(t, dir, nil, time.Now())
	if b.Issued() == "" || b.Fingerprint() != a.Fingerprint() {
		t.Errorf("restart: issued %q", b.Issued())
	}
}

func TestPinned(t *testing.T) {
	a := ensure(t, tlsDir(t), []string{"plane.example"}, time.Now())
	addr := serveTLS(t, a)

	p, err := NewPinned(strings.ToUpper(a.Fingerprint()))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.CA(); ok {
		t.Fatal("CA before a handshake")
	}
	for _, host := range []string{"plane.example", "127.0.0.1", "[::1]"} {
		if err := dial(addr, host, p.Config(host)); err != nil {
			t.Fatalf("pinned, as %s: %v", host, err)
		}
	}
	caPEM, ok := p.CA()
	file, _ := os.ReadFile(a.CAPath())
	if !ok || !bytes.Equal(caPEM, file) {
		t.Errorf("pinned CA %q, want the ca.crt", caPEM)
	}

	// The right pin does not excuse a name the certificate lacks.
	if err := dial(addr, "elsewhere.example", p.Config("elsewhere.example")); err == nil || !strings.Contains(err.Error(), "--san elsewhere.example") {
		t.Errorf("pinned, missing SAN: %v", err)
	}

	// Another CA's pin: the error names both.
	other := ensure(t, tlsDir(t), nil, time.Now())
	wrong, _ := NewPinned(other.Fingerprint())
	err = dial(addr, "127.0.0.1", wrong.Config("127.0.0.1"))
	var pe *PinError
	if !errors.As(err, &pe) {
		t.Fatalf("wrong pin: %v", err)
	}
	if pe.Want != other.Fingerprint() || !slices.Equal(pe.Got, []string{Fingerprint(a.Leaf()), a.Fingerprint()}) {
		t.Errorf("wrong pin: %+v", pe)
	}
	if _, ok := wrong.CA(); ok {
		t.Error("a failed pin handed back a CA")
	}

	// The leaf's own fingerprint is not a CA's.
	leafPin, _ := NewPinned(Fingerprint(a.Leaf()))
	if err := dial(addr, "127.0.0.1", leafPin.Config("127.0.0.1")); !errors.As(err, &pe) {
		t.Errorf("the leaf's fingerprint as pin: %v", err)
	}

	// A server that presents the pinned CA beside a leaf another CA signed.
	forged := *a
	forged.ca = other.CA()
	forgedAddr := serveTLS(t, &forged)
	pin, _ := NewPinned(other.Fingerprint())
	if err := dial(forgedAddr, "127.0.0.1", pin.Config("127.0.0.1")); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("leaf of another CA: %v", err)
	}

	for _, bad := range []string{"", "abc", strings.Repeat("g", 64)} {
		if _, err := NewPinned(bad); err == nil {
			t.Errorf("NewPinned(%q) accepted", bad)
		}
	}
}

func TestTamperedFiles(t *testing.T) {
	other := ensure(t, tlsDir(t), nil, start)
	otherCA, _ := os.ReadFile(other.CAPath())
	otherKey, _ := os.ReadFile(filepath.Join(other.Dir(), CAKeyFile))
	otherLeaf, _ := os.ReadFile(filepath.Join(other.Dir(), ServerCertFile))

	cases := []struct {
		name, file string
		data       []byte
		mode       os.FileMode
		want       string
	}{
		{"corrupt CA", CAFile, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o644, CAFile},
		{"not PEM", CAFile, []byte("hello"), 0o644, "not a PEM CERTIFICATE"},
		{"CA of another key", CAFile, otherCA, 0o644, "is not the key of"},
		{"CA key of another CA", CAKeyFile, otherKey, 0o600, "is not the key of"},
		{"CA key shared", CAKeyFile, nil, 0o644, "chmod 600"},
		{"server cert of another CA", ServerCertFile, otherLeaf, 0o644, "is not signed by the CA"},
		{"server key corrupt", ServerKeyFile, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600, ServerKeyFile},
		{"server key shared", ServerKeyFile, nil, 0o640, "chmod 600"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tlsDir(t)
			ensure(t, dir, nil, start)
			path := filepath.Join(dir, tc.file)
			if tc.data != nil {
				if err := os.WriteFile(path, tc.data, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			for what, f := range map[string]func() error{
				"Ensure": func() error { _, err := Ensure(dir, nil, start); return err },
				"Load":   func() error { _, err := Load(dir); return err },
			} {
				err := f()
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v, want an error naming %s and %q", what, err, path, tc.want)
				}
			}
		})
	}

	t.Run("CA key missing", func(t *testing.T) {
		dir := tlsDir(t)
		a := ensure(t, dir, nil, start)
		os.Remove(filepath.Join(dir, CAKeyFile))
		_, err := Ensure(dir, nil, start)
		if err == nil || !strings.Contains(err.Error(), CAKeyFile) {
			t.Fatalf("%v", err)
		}
		if b, _ := Load(dir); b != nil && b.Fingerprint() != a.Fingerprint() {
			t.Error("the CA was replaced")
		}
	})
	t.Run("server pair missing is issued again", func(t *testing.T) {
		dir := tlsDir(t)
		a := ensure(t, dir, nil, start)
		os.Remove(filepath.Join(dir, ServerCertFile))
		os.Remove(filepath.Join(dir, ServerKeyFile))
		b := ensure(t, dir, nil, start)
		if b.Issued() == "" || b.Fingerprint() != a.Fingerprint() {
			t.Errorf("issued %q", b.Issued())
		}
		if _, err := Load(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Load of an empty dir: %v", err)
		}
	})
	t.Run("ValidName", func(t *testing.T) {
		for name, want := range map[string]bool{"plane.example": true, "[::1]": true, "10.0.0.1": true, "Host-1.": true,
			"under_score": false, "": false, "-a": false, "a..b": false} {
			if got := ValidName(name); got != want {
				t.Errorf("ValidName(%q) = %v", name, got)
			}
		}
	})
	t.Run("a bad SAN", func(t *testing.T) {
		if _, err := Ensure(tlsDir(t), []string{"bad name!"}, start); err == nil {
			t.Error("accepted")
		}
	})
}
