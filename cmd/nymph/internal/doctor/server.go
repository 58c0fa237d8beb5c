package doctor

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/hostio/signer"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Skews beyond which the clock check warns and fails: a signature is
// refused outside identity.Window, and a clock already 5 s off is
// drifting towards it.
const (
	SkewWarn = 5 * time.Second
	SkewFail = identity.Window
)

// Server is a control plane doctor reaches, and how it verifies it.
type Server struct {
	// URL is the control plane's base URL.
	URL string
	// CAFile is the CA its certificate must be signed by ("" trusts the
	// system's roots).
	CAFile string
	// URLSetting and CASetting name where URL and CAFile come from, in
	// fixes ("[server] url (--server)", "--ca-file").
	URLSetting, CASetting string
	// Check names the reachability check, which the others point to when
	// they cannot connect ("server-reachable").
	Check string
	// Now reads the clock (time.Now when nil).
	Now func() time.Time
}

func (s Server) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

func (s Server) healthz() string { return strings.TrimRight(s.URL, "/") + "/healthz" }

// get sends GET /healthz, verified as every nymph client verifies.
func (s Server) get(ctx context.Context) (*http.Response, error) {
	cfg, err := tlsca.ClientConfig(s.CAFile)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, CheckRedirect: httpclient.RefuseRedirect}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.healthz(), nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", s.healthz(), err)
	}
	resp, err := hc.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		// Its text repeats the method and URL every message here names.
		return nil, ue.Err
	}
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// unverified reports a server whose certificate this client does not
// trust: the TLS check says why.
func unverified(err error) bool {
	var cve *tls.CertificateVerificationError
	return errors.As(err, &cve)
}

// cannotReach is the skip of a check that needs the server when it
// cannot be had, pointing to the check that says why.
func (s Server) cannotReach(err error) Result {
	if unverified(err) {
		return Skip("the server's certificate does not verify (see %s-tls)", strings.TrimSuffix(s.Check, "-reachable"))
	}
	return Skip("cannot reach the server (see %s): %v", s.Check, err)
}

// Reachable checks that GET /healthz answers 200.
func (s Server) Reachable() func(context.Context) Result {
	return func(ctx context.Context) Result {
		if s.URL == "" {
			return Skip("no control plane URL given")
		}
		if _, err := url.Parse(s.URL); err != nil {
			return Fail("correct "+s.URLSetting, "%s: %v", s.URL, err)
		}
		start := s.now()
		resp, err := s.get(ctx)
		took := s.now().Sub(start).Round(time.Millisecond)
		switch {
		case err != nil && unverified(err):
			return Skip("%s answers, but its certificate does not verify (see %s-tls)", s.URL, strings.TrimSuffix(s.Check, "-reachable"))
		case err != nil:
			return Fail("start the control plane, or set "+s.URLSetting+" to the address it listens on",
				"GET %s: %v", s.healthz(), err)
		case resp.StatusCode != http.StatusOK:
			return Fail("check that "+s.URL+" is a nymph control plane (nymph serve), not something else at that address",
				"GET %s answered %d", s.healthz(), resp.StatusCode)
		}
		return OK("GET %s: 200 in %s", s.healthz(), took)
	}
}

// TLS checks that the server's certificate verifies by the CA file (or
// the system's roots), and says which CA the server presents.
func (s Server) TLS() func(context.Context) Result {
	return func(ctx context.Context) Result {
		u, err := url.Parse(s.URL)
		switch {
		case s.URL == "":
			return Skip("no control plane URL given")
		case err != nil || u.Host == "":
			return Skip("%s is not a URL (see %s)", s.URL, s.Check)
		case u.Scheme == "http" && httpclient.IsLoopbackHost(u.Hostname()):
			return Skip("plain http on loopback: nothing to verify")
		case u.Scheme == "http":
			return Warn("serve https (nymph serve's default) and give its CA here ("+s.CASetting+")",
				"plain http to %s: the server is not verified and requests travel in clear", u.Host)
		}
		cfg, err := tlsca.ClientConfig(s.CAFile)
		if err != nil {
			return Fail("point "+s.CASetting+" at nymph serve's DATA-DIR/tls/"+tlsca.CAFile, "%v", err)
		}
		cfg.ServerName = u.Hostname()
		port := u.Port()
		if port == "" {
			port = "443"
		}
		d := tls.Dialer{Config: cfg}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
		var cve *tls.CertificateVerificationError
		switch {
		case errors.As(err, &cve):
			return s.mismatch(u.Hostname(), cve)
		case err != nil:
			return Skip("cannot connect (see %s): %v", s.Check, err)
		}
		defer conn.Close()
		cs := conn.(*tls.Conn).ConnectionState()
		by := "the system's roots"
		if s.CAFile != "" {
			by = s.CAFile
		}
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return OK("the certificate of %s verifies by %s", u.Host, by)
		}
		chain := cs.VerifiedChains[0]
		return OK("the certificate of %s verifies by %s: CA fingerprint %s", u.Host, by, tlsca.Fingerprint(chain[len(chain)-1]))
	}
}

// mismatch reports a certificate that did not verify: what the server
// presented, what the CA file holds, and tlsca's hint.
func (s Server) mismatch(host string, cve *tls.CertificateVerificationError) Result {
	presented := "no certificate"
	var cas, leaf []string
	for i, c := range cve.UnverifiedCertificates {
		if c.IsCA && c.BasicConstraintsValid {
			cas = append(cas, tlsca.Fingerprint(c))
		} else if i == 0 {
			leaf = append(leaf, tlsca.Fingerprint(c))
		}
	}
	switch {
	case len(cas) > 0:
		presented = "CA " + strings.Join(cas, ", ")
	case len(leaf) > 0:
		presented = "a certificate " + leaf[0] + " and no CA"
	}
	by := "the system's roots"
	if s.CAFile != "" {
		by = s.CAFile
		if fps, err := caFingerprints(s.CAFile); err == nil {
			by += " (" + strings.Join(fps, ", ") + ")"
		}
	}
	fix := "point " + s.CASetting + " at the CA of the control plane this host joins: nymph serve's DATA-DIR/tls/" + tlsca.CAFile +
		" (`nymph serve status --data-dir DIR` prints its fingerprint)"
	var ut *tlsca.UntrustedError
	if errors.As(tlsca.Explain(cve), &ut) {
		fix = ut.Hint
	}
	return Fail(fix, "%s presents %s, which does not verify by %s: %v", host, presented, by, cve.Err)
}

// caFingerprints lists the fingerprint of every certificate in a PEM
// file.
func caFingerprints(path string) ([]string, error) {
	certs, err := tlsca.ReadCAFile(path)
	if err != nil {
		return nil, err
	}
	fps := make([]string, len(certs))
	for i, c := range certs {
		fps[i] = tlsca.Fingerprint(c)
	}
	return fps, nil
}

// Clock compares this host's clock with the Date header of the server's
// /healthz answer. Date is in whole seconds, so the server's time is
// taken as the middle of its second, against the middle of the round
// trip here.
func (s Server) Clock() func(context.Context) Result {
	return func(ctx context.Context) Result {
		if s.URL == "" {
			return Skip("no control plane URL given")
		}
		before := s.now()
		resp, err := s.get(ctx)
		after := s.now()
		if err != nil {
			return s.cannotReach(err)
		}
		date, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			return Skip("the server sent no usable Date header (%q)", resp.Header.Get("Date"))
		}
		here := before.Add(after.Sub(before) / 2)
		skew := date.Add(500 * time.Millisecond).Sub(here)
		side := "ahead of"
		if skew > 0 {
			side = "behind"
		}
		off := skew.Abs().Round(100 * time.Millisecond)
		fix := "synchronise this host's clock (timedatectl set-ntp true, or chronyc makestep)"
		switch {
		case skew.Abs() > SkewFail:
			return Fail(fix, "this host's clock is %s %s the server's: signed requests are refused beyond %s", off, side, SkewFail)
		case skew.Abs() > SkewWarn:
			return Warn(fix, "this host's clock is %s %s the server's (signatures are refused beyond %s)", off, side, SkewFail)
		}
		return OK("this host's clock is within %s of the server's (its Date header, in whole seconds)", max(off, time.Second))
	}
}

// Signed sends a signed POST to /v1/daemon/event with an empty msgpack
// map, which the control plane authenticates and records nothing of:
// the daemon's own signer over the daemon's own client, with its bearer
// when it has one.
func (s Server) Signed(enabled bool, keyFile, tokenFile string) func(context.Context) Result {
	return func(ctx context.Context) Result {
		if !enabled {
			return Skip("[identity] is not enabled: this daemon's requests are not signed")
		}
		text, err := secretfile.ReadToken(keyFile)
		if err != nil {
			return Skip("the key cannot be read (see identity-key)")
		}
		key, err := identity.DecodeSeed([]byte(text))
		if err != nil {
			return Skip("the key does not decode (see identity-key)")
		}
		var token string
		if tokenFile != "" {
			if token, err = secretfile.ReadToken(tokenFile); err != nil {
				return Skip("the token file cannot be read (see token-file)")
			}
		}
		hc, err := httpclient.New(httpclient.Options{BaseURL: s.URL, Token: token, CAFile: s.CAFile})
		if err != nil {
			return Skip("no client for %s: %v", s.URL, err)
		}
		defer hc.CloseIdle()
		sig, err := signer.New(signer.Options{Next: hc, Key: key, ServerURL: s.URL, Random: rand.Reader, Now: s.now})
		if err != nil {
			return Fail("correct "+s.URLSetting, "%v", err)
		}
		resp, err := sig.RoundTrip(ctx, &transport.Request{Endpoint: wire.PathEvent, Body: msgp.AppendMapHeader(nil, 0)})
		if err != nil {
			return s.cannotReach(err)
		}
		what := fmt.Sprintf("POST %s signed by %s", wire.PathEvent, sig.KeyID())
		if resp.Status == http.StatusOK {
			return OK("%s: accepted", what)
		}
		code, msg := wire.ErrorCode(resp.Body)
		if code == "" {
			return Fail("check that "+s.URL+" is this host's control plane", "%s: answered %d", what, resp.Status)
		}
		return Fail(signedFix(code), "%s: refused %d %s: %s", what, resp.Status, code, msg)
	}
}

// signedFix says what to do about a refused signature.
func signedFix(code string) string {
	switch code {
	case plane.ErrSignatureExpired:
		return "synchronise this host's clock (timedatectl set-ntp true, or chronyc makestep)"
	case plane.ErrWrongAudience:
		return "set [server] url to the control plane's public URL (nymph serve --public-url), or a name its certificate carries"
	case wire.ErrKeyRevoked, plane.ErrUnknownKey, plane.ErrSignatureInvalid:
		return "join the host again with a new token from nymph ctl token (nymph daemon join)"
	case plane.ErrNonceMemoryFull:
		return "run doctor again in a second"
	}
	return "see the control plane's log for the refusal"
}
