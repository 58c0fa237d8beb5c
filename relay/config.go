package relay

// This file and report.go are what builds on every system: the relay
// itself needs a POSIX system (relay_windows.go).

import (
	"log/slog"
	"net/http"
	"time"
)

// Config is what a relay needs. Zero durations take the defaults below.
type Config struct {
	Prefix    string // directory of machine directories
	Upstream  string // control plane base URL
	TokenFile string // the relay's bearer, mode 0600
	// CAFile holds the CA an https upstream's certificate must be signed
	// by (nymph serve's DATA-DIR/tls/ca.crt); empty trusts the system's
	// roots. Not used when Client is set.
	CAFile string

	FrameTimeout    time.Duration // stall timer for a partial frame (30 s)
	UpstreamTimeout time.Duration // per upstream request (120 s)
	SpoolInterval   time.Duration // spool polling period (100 ms)
	ShutdownGrace   time.Duration // for requests in flight at shutdown (5 s)
	TokenCheck      time.Duration // how often the token file is re-read (1 s)
	// AllowSharedWriters accepts machine directories and pipes that every
	// user may write.
	AllowSharedWriters bool
	// PipeBudget bounds the pipes the pumps hold open: every request pipe,
	// plus the reply pipes kept open between replies while there is room.
	// Zero derives it from the open-file limit (keptPipeBound).
	PipeBudget int64

	Logger *slog.Logger
	// Client's Transport carries every upstream request (nil: the
	// default, see defaultTransport).
	// Its redirect policy, jar and timeout are not used: the relay never
	// follows a redirect, and UpstreamTimeout bounds each request.
	Client *http.Client
}

// Defaults for Config.
const (
	DefaultFrameTimeout    = 30 * time.Second
	DefaultUpstreamTimeout = 120 * time.Second
	DefaultSpoolInterval   = 100 * time.Millisecond
	DefaultShutdownGrace   = 5 * time.Second
	DefaultTokenCheck      = time.Second
)

// reservedFDs is kept free of pipes for everything else the relay opens.
const reservedFDs = 256
