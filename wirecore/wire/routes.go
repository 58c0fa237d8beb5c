package wire

import (
	"net/url"
	"strings"
)

// The routes of protocol "1" (docs/protocol.md, "Endpoints"): every one is a
// POST. This file is their only home: the daemon posts to them, serve's
// mux serves them, the relay's allow-list admits them, and each names
// them from here.
const (
	PathHello = "/v1/daemon/hello"
	PathPoll  = "/v1/daemon/poll"
	PathAck   = "/v1/daemon/ack"
	PathKeys  = "/v1/daemon/keys"
	PathEvent = "/v1/daemon/event"
	// PathResultChunk is served by control planes but never posted by nymph.
	PathResultChunk = "/v1/daemon/result-chunk"

	// PatternExecResult, PatternExecChunk and PatternPresign are the
	// routes with a parameter, written as net/http's ServeMux patterns
	// (the parameter's name in braces); PathExecResult, PathExecChunk and
	// PathPresign fill them in.
	PatternExecResult = "/v1/daemon/exec/{exec_id}/result"
	PatternExecChunk  = "/v1/daemon/exec/{exec_id}/chunk"
	PatternPresign    = "/v1/namespaces/{ns}/payloads/presign"
)

// DefaultListen is the address nymph serve listens on unless --listen names
// another, and DefaultServerURL the control plane that a daemon ([server]
// url) and nymph ctl (NYMPH_SERVER) reach unless told otherwise: the same
// address, so that all three agree on one host out of the box. serve
// speaks TLS unless told --insecure-http, so the URL is https.
const (
	DefaultListen    = "127.0.0.1:8383"
	DefaultServerURL = "https://" + DefaultListen
)

// DaemonRoutes are the fixed routes under /v1/daemon/, the ones without a
// parameter. A relay forwards these, the per-exec routes and presign, and
// nothing else.
var DaemonRoutes = [...]string{PathHello, PathPoll, PathAck, PathKeys, PathEvent, PathResultChunk}

// PathExecResult is the route an exec's result is posted to.
func PathExecResult(execID string) string {
	return strings.Replace(PatternExecResult, "{exec_id}", url.PathEscape(execID), 1)
}

// PathExecChunk is the route an exec's log chunks are posted to.
func PathExecChunk(execID string) string {
	return strings.Replace(PatternExecChunk, "{exec_id}", url.PathEscape(execID), 1)
}

// PathPresign is the presign route of namespace ns.
func PathPresign(ns string) string {
	return strings.Replace(PatternPresign, "{ns}", url.PathEscape(ns), 1)
}

// HeaderDaemonAuthorization carries a daemon's bearer through a relay
// (docs/protocol.md, "Authentication through a relay"): the relay
// authenticates to the control plane with Authorization, so the daemon's
// own credential travels beside it.
// The X-LS- prefix is inherited from the protocol's first implementation;
// peers written to it expect this exact name.
const HeaderDaemonAuthorization = "X-LS-Daemon-Authorization"

// SetupInvocationPrefix begins the invocation id a setup is acked under:
// a setup command with id C is acked as invocation SetupInvocationID(C).
const SetupInvocationPrefix = "setup-"

// SetupInvocationID is the invocation id the setup command commandID is
// acked under.
func SetupInvocationID(commandID string) string { return SetupInvocationPrefix + commandID }

// SetupCommandID is the command id of a setup's invocation id, and false
// when invocationID is not a setup's.
func SetupCommandID(invocationID string) (string, bool) {
	return strings.CutPrefix(invocationID, SetupInvocationPrefix)
}
