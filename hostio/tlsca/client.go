package tlsca

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
)

// ClientConfig is a client's TLS configuration: TLS 1.3 at least, and the
// server verified against the CA certificates in caFile only, or against
// the system's roots when caFile is empty. The server's host name is
// checked as always (the transport fills ServerName in from the URL).
func ClientConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if caFile == "" {
		return cfg, nil
	}
	pool, err := ReadPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// ReadPool reads the PEM certificates in path (serve's ca.crt, or a
// bundle) as the only roots a client trusts.
func ReadPool(path string) (*x509.CertPool, error) {
	certs, err := ReadCAFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// ReadCAFile reads the certificates of a PEM CA file, in their order; a
// file with none is an error that says which file is wanted.
func ReadCAFile(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsca: read CA file: %w", err)
	}
	if len(data) > maxFile {
		return nil, fmt.Errorf("tlsca: CA file %s: %d bytes, more than a CA file holds", path, len(data))
	}
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsca: CA file %s: %w", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("tlsca: CA file %s holds no PEM certificate (want the ca.crt of nymph serve's data directory)", path)
	}
	return certs, nil
}

// Pinned verifies a server by the fingerprint a join token pins, before
// the host trusts anything else of it: the chain the server presents must
// hold a CA certificate whose fingerprint is the pin, and the server's
// own certificate must verify against that CA alone for the host name
// dialled. After a handshake that passed, CA hands back the CA, so the
// host can keep it as its CA file.
type Pinned struct {
	pin string
	now func() time.Time

	mu sync.Mutex
	ca *x509.Certificate
}

// NewPinned checks the fingerprint (64 hex digits) and returns a pin.
func NewPinned(fingerprint string) (*Pinned, error) {
	fp := strings.ToLower(strings.TrimSpace(fingerprint))
	if len(fp) != 64 || strings.Trim(fp, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("tlsca: CA fingerprint %q: want 64 hex digits", fingerprint)
	}
	return &Pinned{pin: fp, now: time.Now}, nil
}

// Config is the client configuration that checks the pin for a server
// dialled as host (the URL's host name or IP, without port or brackets),
// which it also sets as ServerName. It sets
// InsecureSkipVerify only because Go's own verification needs the roots
// before the handshake and the pin names its root only by fingerprint:
// VerifyConnection does the whole verification instead — the chain up to
// the pinned CA, validity, key usage and the host name — and fails the
// handshake when any of it does not hold.
func (p *Pinned) Config(host string) *tls.Config {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         host,
		InsecureSkipVerify: true, // replaced by VerifyConnection, see above
		VerifyConnection:   func(cs tls.ConnectionState) error { return p.verify(cs, host) },
	}
}

// CA is the pinned CA certificate in PEM, once a handshake verified it;
// false before.
func (p *Pinned) CA() ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ca == nil {
		return nil, false
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.ca.Raw}), true
}

// PinError is a server that presented no CA certificate of the pinned
// fingerprint.
type PinError struct {
	Want string   // the pin
	Got  []string // the fingerprint of every certificate presented, the server's own first
}

func (e *PinError) Error() string {
	got := "no certificate"
	if len(e.Got) > 0 {
		got = strings.Join(e.Got, ", ")
	}
	return fmt.Sprintf("the server presented no CA with the fingerprint the join token pins (want %s, got %s): the token is for another control plane, or something between here and it answered instead", e.Want, got)
}

// verify checks the pin; host is what the client dialled (the connection
// state holds no name for an IP, which is never sent as SNI).
func (p *Pinned) verify(cs tls.ConnectionState, host string) error {
	certs := cs.PeerCertificates
	if len(certs) == 0 {
		return &PinError{Want: p.pin}
	}
	var ca *x509.Certificate
	got := make([]string, len(certs))
	for i, c := range certs {
		got[i] = Fingerprint(c)
		if ca == nil && c.IsCA && c.BasicConstraintsValid && identity.SameFingerprint(got[i], p.pin) {
			ca = c
		}
	}
	if ca == nil {
		return &PinError{Want: p.pin, Got: got}
	}
	if host == "" {
		return errors.New("tlsca: no host name to verify the pinned CA's certificate for")
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(ca)
	for _, c := range certs[1:] {
		if c != ca {
			inter.AddCert(c)
		}
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		DNSName: host, Roots: roots, Intermediates: inter, CurrentTime: p.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("tlsca: the pinned CA %s is the server's, but its certificate does not verify: %w", p.pin, Explain(err))
	}
	p.mu.Lock()
	p.ca = ca
	p.mu.Unlock()
	return nil
}

// Explain adds what to do to an error a client met verifying a server:
// the CA file to pass for an unknown authority, the --san to add for a
// host name the certificate does not name. Any other error is returned as
// it is.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return &UntrustedError{Err: err, Hint: "the server's certificate is not signed by a CA this client trusts: pass --ca-file with the CA nymph serve printed at start (DATA-DIR/tls/" + CAFile + "; `nymph serve status --data-dir DATA-DIR` shows it), or set NYMPH_CA_FILE or the daemon's [server] ca_file to it"}
	case errors.As(err, &host):
		return &UntrustedError{Err: err, Hint: fmt.Sprintf("the server's certificate does not name %s: dial it by a name it has (`nymph serve status` lists them) or start serve with --san %s", host.Host, host.Host)}
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return &UntrustedError{Err: err, Hint: "the server's certificate has expired or is not valid yet: check this host's clock; serve issues a new certificate when it starts"}
	}
	return err
}

// UntrustedError is a server this client would not trust, with what to
// do about it.
type UntrustedError struct {
	Err  error
	Hint string
}

func (e *UntrustedError) Error() string { return e.Err.Error() + "; " + e.Hint }
func (e *UntrustedError) Unwrap() error { return e.Err }
