package transport

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	"github.com/nymphd/nymph/wirecore/frame"
)

// RelayedDefaults is what a carrier through a relay (fifoclient,
// spoolclient) takes for what its config leaves unset: RelayedTimeout for
// a timeout that is not positive, ids from the clock and crypto/rand, and
// a logger that discards.
func RelayedDefaults(timeout time.Duration, ids *frame.IDs, log *slog.Logger) (time.Duration, *frame.IDs, *slog.Logger) {
	if timeout <= 0 {
		timeout = RelayedTimeout
	}
	if ids == nil {
		ids = frame.NewIDs(time.Now(), rand.Reader)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return timeout, ids, log
}

// WithReplyTimeout bounds one relayed request: ctx ends after timeout, and
// its cause then says that no reply came within it.
func WithReplyTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("no reply within %s: %w", timeout, context.DeadlineExceeded))
}
