package inlinehttp

import "syscall"

// idleOpen assumes an idle connection is still open: Windows sockets have
// no MSG_DONTWAIT, and a non-blocking peek would need the socket taken out
// of the mode Go's poller put it in. A connection the upstream closed
// meanwhile then fails its request (the daemon gets a relay_error), and the
// daemon sends the request again, as after any upstream failure; the
// broken connection is not pooled again.
func idleOpen(syscall.RawConn) bool { return true }
