//go:build unix

package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ServeStatus serves /metrics and /status on addr until ctx is done. addr
// must be a loopback address: the figures name pipes and upstream errors,
// and the relay's host is shared.
func (rl *Relay) ServeStatus(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("relay: status listener %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("relay: status listener %q: %w", addr, errNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("relay: status listener: %w", err)
	}
	srv := &http.Server{Handler: rl.metrics.Handler(time.Now), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	rl.log.Info("relay: status listening", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("relay: status listener: %w", err)
	}
	return nil
}
