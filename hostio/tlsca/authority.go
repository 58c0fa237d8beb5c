package tlsca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/wirecore/identity"
)

// The files of an authority's directory. CAFile is the one a client is
// given (--ca-file); the keys never leave the directory.
const (
	CAFile         = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
)

// Lifetimes. A server certificate lives 397 days, the longest a browser
// accepts, so one opened in a browser (the operator API, /healthz) is not
// refused for its lifetime alone; it is re-issued RenewBefore its end, at
// a start of serve, so a serve restarted now and then never lets it lapse.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 397 * 24 * time.Hour
	RenewBefore    = 30 * 24 * time.Hour
	// backdate starts a certificate an hour early, so a client whose
	// clock is a little behind accepts one issued a moment ago.
	backdate = time.Hour
)

// DefaultNames are in every server certificate: a client on the serve's
// own host may always dial it by loopback.
var defaultNames = []string{"localhost", "127.0.0.1", "::1"}

// Authority is a CA and the server certificate it signed, as kept in one
// directory.
type Authority struct {
	dir       string
	ca        *x509.Certificate
	caKey     *ecdsa.PrivateKey
	leaf      *x509.Certificate
	leafKey   *ecdsa.PrivateKey
	createdCA bool
	issued    string // why the server certificate was issued by Ensure; "" when loaded
}

// Ensure returns the authority in dir, making what is missing: on the
// first start a CA and a server certificate for sans (host names or IPs;
// the loopback names are always added). On later starts it loads both and
// issues a new server certificate, signed by the same CA, when one of sans
// is not in it or it ends within RenewBefore of now. A file that is there
// but unreadable, corrupt, or not of this CA is an error naming it: the
// CA is what clients trust, so Ensure never replaces one it found.
func Ensure(dir string, sans []string, now time.Time) (*Authority, error) {
	if err := secretfile.EnsureDir("TLS directory", dir); err != nil {
		return nil, fmt.Errorf("tlsca: %w", err)
	}
	a := &Authority{dir: dir}
	switch err := a.loadCA(); {
	case errors.Is(err, fs.ErrNotExist):
		// No certificate means no client can trust this CA yet: a key
		// without one (a start cut off between the two writes) is
		// replaced.
		if err := a.createCA(now); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	if now.After(a.ca.NotAfter) {
		return nil, fmt.Errorf("tlsca: the CA %s expired on %s; move %s aside to make a new one, then give every client the new %s",
			a.path(CAFile), a.ca.NotAfter.Format(time.DateOnly), dir, CAFile)
	}
	names, err := parseNames(append(slices.Clone(defaultNames), sans...))
	if err != nil {
		return nil, err
	}
	switch err := a.loadServer(); {
	case errors.Is(err, fs.ErrNotExist):
		a.issued = "no server certificate yet"
	case err != nil:
		return nil, err
	default:
		a.issued = renewal(a.leaf, names, now)
	}
	if a.issued != "" {
		if err := a.issueServer(names, now); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Load reads the authority in dir without writing anything (for a status
// report); every file must be there and consistent.
func Load(dir string) (*Authority, error) {
	a := &Authority{dir: dir}
	if err := a.loadCA(); err != nil {
		return nil, err
	}
	if err := a.loadServer(); err != nil {
		return nil, err
	}
	return a, nil
}

// renewal says why a server certificate must be issued again for names at
// now, or "" when it serves.
func renewal(leaf *x509.Certificate, want names, now time.Time) string {
	have := namesOf(leaf)
	for _, n := range want.all() {
		if !slices.Contains(have, n) {
			return fmt.Sprintf("%s is not in the server certificate", n)
		}
	}
	if now.Before(leaf.NotBefore) {
		return "the server certificate is not valid yet"
	}
	if now.Add(RenewBefore).After(leaf.NotAfter) {
		return fmt.Sprintf("the server certificate ends on %s", leaf.NotAfter.Format(time.DateOnly))
	}
	return ""
}

// Dir is the authority's directory.
func (a *Authority) Dir() string { return a.dir }

// CAPath is the CA certificate's file, the one a client takes as --ca-file.
func (a *Authority) CAPath() string { return a.path(CAFile) }

// CA is the CA certificate.
func (a *Authority) CA() *x509.Certificate { return a.ca }

// Leaf is the server certificate.
func (a *Authority) Leaf() *x509.Certificate { return a.leaf }

// Fingerprint is the CA's fingerprint, the one a join token pins.
func (a *Authority) Fingerprint() string { return Fingerprint(a.ca) }

// Names are the host names and IPs the server certificate is valid for.
func (a *Authority) Names() []string { return namesOf(a.leaf) }

// CreatedCA says Ensure made the CA (the first start).
func (a *Authority) CreatedCA() bool { return a.createdCA }

// Issued says why Ensure issued the server certificate, "" when it kept
// the one it found.
func (a *Authority) Issued() string { return a.issued }

// ServerConfig is the listener's TLS configuration: TLS 1.3 at least, the
// server certificate followed by the CA's, HTTP/2 and HTTP/1.1 offered.
func (a *Authority) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		Certificates: []tls.Certificate{{
			Certificate: [][]byte{a.leaf.Raw, a.ca.Raw},
			PrivateKey:  a.leafKey,
			Leaf:        a.leaf,
		}},
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// Fingerprint is a certificate's fingerprint as a join token pins it: the
// SHA-256 of its SubjectPublicKeyInfo (identity.SPKIFingerprint).
func Fingerprint(cert *x509.Certificate) string {
	return identity.SPKIFingerprint(cert.RawSubjectPublicKeyInfo)
}

func (a *Authority) path(name string) string { return filepath.Join(a.dir, name) }

func (a *Authority) loadCA() error {
	ca, err := readCert(a.path(CAFile))
	if err != nil {
		return err
	}
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.CheckSignatureFrom(ca) != nil {
		return fmt.Errorf("tlsca: %s is not a self-signed CA certificate", a.path(CAFile))
	}
	key, err := readKey(a.path(CAKeyFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// The certificate without its key cannot sign: that is a
			// damaged directory, not a fresh one.
			return fmt.Errorf("tlsca: %s is there but its key %s is not: %w", a.path(CAFile), a.path(CAKeyFile), errDamaged)
		}
		return err
	}
	if !samePublic(ca, key) {
		return fmt.Errorf("tlsca: %s is not the key of %s", a.path(CAKeyFile), a.path(CAFile))
	}
	a.ca, a.caKey = ca, key
	return nil
}

// errDamaged keeps a missing key from reading as fs.ErrNotExist, which
// would make a new CA.
var errDamaged = errors.New("restore it, or move the directory aside to make a new CA (every client must then be given the new ca.crt)")

func (a *Authority) loadServer() error {
	leaf, err := readCert(a.path(ServerCertFile))
	if err != nil {
		return err
	}
	if err := leaf.CheckSignatureFrom(a.ca); err != nil {
		return fmt.Errorf("tlsca: %s is not signed by the CA %s: %w", a.path(ServerCertFile), a.path(CAFile), err)
	}
	key, err := readKey(a.path(ServerKeyFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tlsca: %s is there but its key %s is not; remove %s to issue a new one", a.path(ServerCertFile), a.path(ServerKeyFile), a.path(ServerCertFile))
		}
		return err
	}
	if !samePublic(leaf, key) {
		return fmt.Errorf("tlsca: %s is not the key of %s", a.path(ServerKeyFile), a.path(ServerCertFile))
	}
	a.leaf, a.leafKey = leaf, key
	return nil
}

func (a *Authority) createCA(now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("tlsca: generate the CA key: %w", err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: strings.TrimSpace("nymph serve CA " + host)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	ca, err := sign(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	// The key first: a certificate on disk means its key is too.
	if err := writeKey(a.path(CAKeyFile), key); err != nil {
		return err
	}
	if err := writeCert(a.path(CAFile), ca); err != nil {
		return err
	}
	a.ca, a.caKey, a.createdCA = ca, key, true
	return nil
}

func (a *Authority) issueServer(n names, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("tlsca: generate the server key: %w", err)
	}
	end := now.Add(ServerValidity)
	if end.After(a.ca.NotAfter) {
		end = a.ca.NotAfter // a certificate cannot outlive its CA
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: n.first()},
		NotBefore:   now.Add(-backdate),
		NotAfter:    end,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    n.dns,
		IPAddresses: n.ips,
	}
	leaf, err := sign(tmpl, a.ca, &key.PublicKey, a.caKey)
	if err != nil {
		return err
	}
	if err := writeKey(a.path(ServerKeyFile), key); err != nil {
		return err
	}
	if err := writeCert(a.path(ServerCertFile), leaf); err != nil {
		return err
	}
	a.leaf, a.leafKey = leaf, key
	return nil
}

func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("tlsca: serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("tlsca: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

// names are a certificate's subject alternative names, parsed.
type names struct {
	dns []string
	ips []net.IP
}

// parseNames reads host names and IPs ("[::1]" too), lower-cases names
// and drops duplicates and empty or all-interfaces entries, which no
// client dials.
func parseNames(in []string) (names, error) {
	var n names
	for _, s := range in {
		s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
		if s == "" {
			continue
		}
		if ip := net.ParseIP(s); ip != nil {
			if ip.IsUnspecified() || slices.ContainsFunc(n.ips, ip.Equal) {
				continue
			}
			n.ips = append(n.ips, ip)
			continue
		}
		s = strings.ToLower(strings.TrimSuffix(s, "."))
		if !validDNSName(s) {
			return names{}, fmt.Errorf("tlsca: %q is neither an IP address nor a host name", s)
		}
		if !slices.Contains(n.dns, s) {
			n.dns = append(n.dns, s)
		}
	}
	return n, nil
}

// ValidName reports whether s can be a name of a server certificate: an
// IP address, or a host name of letters, digits, '-' and '.'.
func ValidName(s string) bool {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
	return net.ParseIP(s) != nil || validDNSName(strings.ToLower(strings.TrimSuffix(s, ".")))
}

// validDNSName accepts letters, digits, '-', '.', and a leading "*." for
// a wildcard, which is what a certificate may name.
func validDNSName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	s = strings.TrimPrefix(s, "*.")
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func (n names) all() []string {
	out := slices.Clone(n.dns)
	for _, ip := range n.ips {
		out = append(out, ip.String())
	}
	return out
}

// first is the certificate's common name: the first name that is not a
// loopback one, else localhost. Clients check the SANs, not this.
func (n names) first() string {
	for _, s := range n.all() {
		if !slices.Contains(defaultNames, s) {
			return s
		}
	}
	return "localhost"
}

func namesOf(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

func samePublic(c *x509.Certificate, key *ecdsa.PrivateKey) bool {
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	return ok && pub.Equal(&key.PublicKey)
}

// maxFile bounds what is read of a certificate or key file: both are
// well under a kilobyte.
const maxFile = 64 << 10

func readPEM(path, want string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsca: read %s: %w", path, err)
	}
	if len(data) > maxFile {
		return nil, fmt.Errorf("tlsca: %s: %d bytes, too large for a %s", path, len(data), want)
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != want {
		return nil, fmt.Errorf("tlsca: %s: not a PEM %s", path, want)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("tlsca: %s: more than one PEM block", path)
	}
	return block.Bytes, nil
}

func readCert(path string) (*x509.Certificate, error) {
	der, err := readPEM(path, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsca: %s: %w", path, err)
	}
	return c, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tlsca: read %s: %w", path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("tlsca: %w", &secretfile.SharedError{What: "TLS key", Path: path, Mode: st.Mode()})
	}
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("tlsca: %s: %w", path, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("tlsca: %s: a %T, not an ECDSA key", path, k)
	}
	return key, nil
}

func writeCert(path string, c *x509.Certificate) error {
	return wrapWrite(secretfile.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o644))
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("tlsca: encode %s: %w", path, err)
	}
	return wrapWrite(secretfile.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))
}

// wrapWrite names the package in a write's error.
func wrapWrite(err error) error {
	if err != nil {
		return fmt.Errorf("tlsca: %w", err)
	}
	return nil
}
