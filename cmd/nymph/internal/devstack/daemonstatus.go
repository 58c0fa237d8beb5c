package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/nymphd/nymph/hostio/introspect"
)

// daemonStatus is the daemon's GET /status document (served by
// hostio/introspect on the [introspect] listen address): the daemon's own
// view of itself, as opposed to the server's view of the worker.
type daemonStatus struct{ introspect.StatusDoc }

// String says what the daemon is doing, for an error message.
func (st daemonStatus) String() string {
	if st.State == "" {
		return "no status from its introspection server"
	}
	s := fmt.Sprintf("state %s, %d hellos (%d failed)", st.State, st.Counters["hellos"], st.Counters["hello_errors"])
	if st.BackoffS > 0 {
		s += fmt.Sprintf(", next try in %.1fs", st.BackoffS)
	}
	return s
}

// setupsIdle reports whether no setup runs or waits, with at least n done.
func (st daemonStatus) setupsIdle(n uint64) bool {
	return !st.InFlight.SetupRunning && st.InFlight.SetupsQueued == 0 && st.Counters["setups"] >= n
}

// daemonStatus fetches the daemon's status from its introspection server.
func (s *Stack) daemonStatus(ctx context.Context) (daemonStatus, error) {
	var st daemonStatus
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.IntrospectURL, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: %s", s.IntrospectURL, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("GET %s: %w", s.IntrospectURL, err)
	}
	return st, nil
}

// waitDaemon polls the daemon's status until ok says so, the daemon or
// serve exits, or ctx ends. The server may not be listening yet (it is
// bound during the daemon's boot), so a failed fetch is retried. The last
// status read comes back either way.
func (s *Stack) waitDaemon(ctx context.Context, ok func(daemonStatus) bool) (daemonStatus, error) {
	var last daemonStatus
	pause := 20 * time.Millisecond
	for {
		if st, err := s.daemonStatus(ctx); err == nil {
			last = st
			if ok(st) {
				return st, nil
			}
		}
		select {
		case <-s.Exited():
			return last, fmt.Errorf("%s", s.Why())
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 250*time.Millisecond)
	}
}
