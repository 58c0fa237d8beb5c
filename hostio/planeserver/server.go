package planeserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Request size limits (their values live in wirecore/wire). A body over
// its limit is answered 413 and the server keeps serving.
const (
	// MaxControlBody bounds hello, poll and presign requests.
	MaxControlBody = wire.MaxControlBodyBytes
	// MaxResultBody bounds acks (result blobs), exec results and
	// operator requests.
	MaxResultBody = wire.MaxResultBodyBytes
	// MaxChunkBody bounds one log chunk.
	MaxChunkBody = wire.MaxChunkBodyBytes
	// MaxLogPage bounds the bytes of one logs page.
	MaxLogPage = 1 << 20
)

// Config wires a Server.
type Config struct {
	// Store keeps the records; required.
	Store Store
	// Blobs serves payload presigns; nil answers them 501.
	Blobs BlobStore
	// DaemonToken is the bootstrap bearer of daemon routes; empty accepts
	// any daemon request.
	DaemonToken string
	// RelayToken is the bearer a relay presents when it carries the
	// daemon's bearer in X-LS-Daemon-Authorization; empty means the
	// daemon token doubles as the relay token.
	RelayToken string
	// TrustRelayDaemons accepts a daemon request that carries a valid
	// relay token and no X-LS-Daemon-Authorization as a bearer-mode
	// daemon's: a daemon of protocol "1" behind a relay writes raw frames,
	// which have no room for its bearer. Off, such a request is answered
	// 401 with a message that says so. A wrong daemon bearer is refused
	// either way.
	TrustRelayDaemons bool
	// PublicURL is the base URL daemons reach this server at
	// ("https://plane.example", "http://127.0.0.1:8383"); the stdout_url
	// of a streamed exec is built from it, because protocol "1" hands the
	// daemon a URL, not a path. Required.
	PublicURL string
	// Releases is serve --releases: a directory of nymph-{os}-{arch}-{version}
	// binaries and their SHA256SUMS, served on operator.PathRelease; an
	// update without a url is derived from it. Empty serves none.
	Releases string
	// AutoUpdateEvery is how often at most a worker whose version is not
	// Plane.TargetVersion is sent an update derived from Releases (both
	// needed); 0 is DefaultAutoUpdateEvery.
	AutoUpdateEvery time.Duration
	// AdminToken is the bearer of the operator API; required.
	AdminToken string
	// Plane is the core's policy; Entropy is required.
	Plane plane.Config
	// TickEvery is the health clock's period (default 1 s).
	TickEvery time.Duration
	// Now reads the clock (default time.Now).
	Now func() time.Time
	// HeaderTimeout, BodyIdleTimeout, BodyTimeout and IdleConnTimeout
	// bound the waits for a request's bytes (see body.go); zero takes
	// the wire package's value of the same name.
	HeaderTimeout   time.Duration
	BodyIdleTimeout time.Duration
	BodyTimeout     time.Duration
	IdleConnTimeout time.Duration
	// MaxLargeBodies is how many bodies over wire.LargeBodyBytes are read
	// and held at once (default wire.DefaultMaxLargeBodies); one more
	// waits up to LargeBodyWait (default wire.LargeBodyWait) for a slot,
	// then is answered 503 with Retry-After.
	MaxLargeBodies int
	LargeBodyWait  time.Duration
	// Audience is the origin every request signature must name
	// ("https://plane.example:8383"); empty takes PublicURL's origin
	// (scheme, host and port, no path), which is what a daemon signs for.
	Audience string
	// OtherAudiences are the other origins daemons may reach this server
	// at and sign for (its certificate's other names); see
	// plane.Config.OtherAudiences.
	OtherAudiences []string
	// RequireSignatures refuses unsigned daemon requests, bearer or not
	// (hello with the enrollment_signature_required reject, the other
	// routes 401): turn it on once every host joined with a token.
	RequireSignatures bool
	// CAFingerprint is identity.SPKIFingerprint of the CA that signs this
	// server's certificate, the half of a join token that pins it. Empty
	// (no TLS), tokens cannot be minted: a token must pin the CA.
	CAFingerprint string
	// Log receives the server's log; nil discards it.
	Log *slog.Logger
}

// Server is `nymph serve`: an http.Handler plus the loop that owns the
// plane core. Create it with New, run the loop with Run (or Serve, which
// also serves HTTP), and route requests to Handler.
type Server struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	in     chan message
	stop   chan struct{} // closed when the loop has ended
	nextID atomic.Uint64
	core   *plane.Plane // owned by the loop goroutine
	// rawRelayRefused logs, once, that relayed requests without a daemon
	// bearer are being refused, and what would accept them.
	rawRelayRefused sync.Once
	// workerLimitLogged logs, once, that hellos of new machines are being
	// refused for the worker limit.
	workerLimitLogged sync.Once
	// handler is mux with every body under the body deadlines, and every
	// request counted.
	handler http.Handler
	metrics metrics
	// largeBodies holds one token per large body being read or held.
	largeBodies chan struct{}
	// largeBodyFreed says a large body was let go since the last
	// collectLargeGarbage.
	largeBodyFreed atomic.Bool
	// enrolls counts enrolling hellos per peer.
	enrolls enrollLimiter
	// chunkPathPrefix is the public URL's path: a log chunk is signed over
	// the path of the stdout_url handed out, which a proxy in front of
	// serve strips.
	chunkPathPrefix string
}

// New loads the store and rebuilds the plane from it.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("planeserver: no store")
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("planeserver: no admin token")
	}
	if cfg.Plane.Entropy == nil {
		return nil, errors.New("planeserver: no entropy source")
	}
	public, err := parsePublicURL(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	cfg.Plane.ChunkURLBase = strings.TrimRight(public.String(), "/")
	if cfg.Audience == "" {
		// As a daemon's signer names it: scheme://host[:port], lowercased.
		cfg.Audience = identity.Audience(public)
	}
	cfg.Plane.Audience = cfg.Audience
	cfg.Plane.OtherAudiences = cfg.OtherAudiences
	cfg.Plane.RequireSignatures = cfg.RequireSignatures
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RelayToken == "" {
		cfg.RelayToken = cfg.DaemonToken
	}
	cfg.HeaderTimeout = cmp.Or(cfg.HeaderTimeout, wire.HeaderTimeout)
	cfg.BodyIdleTimeout = cmp.Or(cfg.BodyIdleTimeout, wire.BodyIdleTimeout)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, wire.BodyTimeout)
	cfg.IdleConnTimeout = cmp.Or(cfg.IdleConnTimeout, wire.IdleConnTimeout)
	cfg.LargeBodyWait = cmp.Or(cfg.LargeBodyWait, wire.LargeBodyWait)
	if cfg.MaxLargeBodies <= 0 {
		cfg.MaxLargeBodies = wire.DefaultMaxLargeBodies
	}
	s := &Server{
		cfg:  cfg,
		log:  cfg.Log,
		in:   make(chan message, 1024),
		stop: make(chan struct{}),
	}
	s.largeBodies = make(chan struct{}, cfg.MaxLargeBodies)
	s.chunkPathPrefix = strings.TrimRight(public.EscapedPath(), "/")
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if ip := net.ParseIP(public.Hostname()); ip != nil && ip.IsUnspecified() {
		s.log.Warn("the public URL names no host a daemon can reach (an all-interfaces address); log-sink URLs built from it will not work: give the URL daemons reach this server at",
			"public_url", public.Redacted())
	}
	core, err := s.restore(ctx)
	if err != nil {
		return nil, err
	}
	s.core = core
	s.routes()
	s.handler = s.guardBodies(counted(&s.metrics, s.mux))
	return s, nil
}

// parsePublicURL checks that a public URL is an absolute http(s) URL that
// an endpoint path can follow.
func parsePublicURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("planeserver: no public URL (the base of the stdout_url handed to streamed execs)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("planeserver: public URL %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, fmt.Errorf("planeserver: public URL %q: want http:// or https://, a host and at most a path", raw)
	}
	return u, nil
}

func (s *Server) restore(ctx context.Context) (*plane.Plane, error) {
	snap, err := s.cfg.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("planeserver: load store: %w", err)
	}
	core, err := plane.Restore(s.cfg.Plane, snap, s.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("planeserver: restore: %w", err)
	}
	return core, nil
}

// Handler serves every route: daemon, operator, presign, blobs, /healthz.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve runs the loop and serves HTTP on ln until ctx is cancelled, then
// answers open requests 503, stops accepting, and waits up to grace for
// in-flight handlers.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleConnTimeout,
		MaxHeaderBytes:    wire.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	loopDone := make(chan error, 1)
	go func() { loopDone <- s.Run(ctx) }()
	go s.autoUpdate(ctx)
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	select {
	case err := <-serveDone:
		return fmt.Errorf("planeserver: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	<-loopDone // parked requests are answered; handlers return at once
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// What is left past the grace holds no request of ours: net/http
		// counts a connection that has not sent its first one (dialled
		// ahead, or mid-TLS handshake) as busy for 5 s. Closing it loses
		// nothing, and the stop is still a clean one.
		s.log.Warn("connections still open after the shutdown grace; closing them", "grace", grace, "err", err)
		if err := srv.Close(); err != nil {
			return fmt.Errorf("planeserver: close: %w", err)
		}
	}
	return nil
}
