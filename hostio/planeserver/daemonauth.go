package planeserver

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// daemonCreds reads what a daemon request presents besides its body: the
// signature headers, a hello's join token, a rotation's new-key proof,
// and whether its bearer (direct or through a relay) is the daemon's.
// The plane decides what they allow; refusal is the 401 body's error
// when the request is refused on its headers, and message its words.
func (s *Server) daemonCreds(r *http.Request) (a plane.Auth, refusal, message string) {
	sig, err := identity.ParseSignature(r.Header.Values)
	switch {
	case errors.Is(err, identity.ErrNoSignature):
	case err != nil:
		return a, plane.ErrMalformedSignature, err.Error()
	default:
		// Checked on the headers, before a byte of the body is read: a
		// stale signature costs the server no body. The plane checks it
		// again with everything else.
		// A hello is answered with its reject instead, as all its refusals.
		if now := s.cfg.Now(); r.URL.Path != wire.PathHello && !identity.Fresh(sig.Timestamp, now) {
			return a, plane.ErrSignatureExpired, fmt.Sprintf("signed at %d, %ds from this control plane's clock (%d); the window is %s either way: check the host's clock",
				sig.Timestamp, now.Unix()-sig.Timestamp, now.Unix(), identity.Window)
		}
		a.Sig = &sig
	}
	if r.URL.Path == wire.PathHello {
		a.EnrollSecret = r.Header.Get(identity.HeaderEnrollToken)
	}
	if r.URL.Path == wire.PathKeys {
		a.NewKeySig = r.Header.Get(identity.HeaderNewKeySignature)
	}
	bearer, refused := s.bearerOf(r, a.Sig != nil || a.EnrollSecret != "")
	if refused != "" {
		return a, refused, ""
	}
	a.Bearer = bearer
	return a, "", ""
}

// bearerOf says whether r carries a valid daemon bearer, or why it is
// refused (bearer checks, docs/protocol.md "Authentication through a
// relay"). A signed or enrolling request (proves) needs no bearer — the
// plane checks what it proves — but an Authorization it does carry must
// still be the daemon's or a relay's token: a wrong credential is never
// ignored.
func (s *Server) bearerOf(r *http.Request, proves bool) (bool, string) {
	if s.cfg.DaemonToken == "" {
		return true, ""
	}
	auth := r.Header.Get("Authorization")
	switch {
	case auth == "" && proves:
		return false, ""
	case bearerIs(auth, s.cfg.DaemonToken):
		return true, ""
	case !bearerIs(auth, s.cfg.RelayToken):
		return false, refusedBearer
	}
	if carried := r.Header.Values(wire.HeaderDaemonAuthorization); len(carried) > 0 {
		if len(carried) == 1 && bearerIs(carried[0], s.cfg.DaemonToken) {
			return true, ""
		}
		return false, refusedRelayBearer
	}
	if s.cfg.TrustRelayDaemons {
		return true, ""
	}
	if proves {
		return false, "" // a relay carrying a signed request vouches for nothing
	}
	s.rawRelayRefused.Do(func() {
		s.log.Warn("refusing relayed daemon requests that carry no daemon bearer (raw relay frames); start nymph serve with --trust-relay-daemons to accept them on the relay's token",
			"path", r.URL.Path)
	})
	return false, refusedRawRelay
}

// Enrolment rate limit: a join token's secret is 256 bits, so the limit
// is not what stops a guess; it bounds the work (a signature check and a
// store write per failed attempt) one peer can cause.
const (
	EnrollPerMinute   = 10
	enrollRetryAfterS = 60
	// maxEnrollPeers bounds the peers counted in one minute; past it
	// every new peer is refused until the minute ends, so the map never
	// grows with the number of addresses an attacker has.
	maxEnrollPeers = 4096
)

// enrollLimiter counts enrolling hellos per peer address in fixed
// one-minute windows.
type enrollLimiter struct {
	mu     sync.Mutex
	window time.Time
	counts map[string]int
}

// allow counts one enrolling hello of peer at now and reports whether it
// is within the limit.
func (l *enrollLimiter) allow(peer string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := now.Truncate(time.Minute); !w.Equal(l.window) || l.counts == nil {
		l.window, l.counts = w, make(map[string]int)
	}
	n, known := l.counts[peer]
	if !known && len(l.counts) >= maxEnrollPeers {
		return false
	}
	if n >= EnrollPerMinute {
		return false
	}
	l.counts[peer] = n + 1
	return true
}

// peerHost is the transport peer's address without its port: never a
// forwarded header, which the peer writes itself.
func peerHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
