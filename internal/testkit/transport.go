package testkit

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nymphd/nymph/hostio/transport"
)

// AcksAtOnce sends n acks through tr at once, with bodies r0 … r<n-1>, and
// checks that each caller gets status 200 and echo(body): the reply to its
// own request, not to another in flight beside it.
func AcksAtOnce(t testing.TB, tr transport.Transport, n int, echo func(body string) string) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf("r%d", i)
			resp, err := tr.RoundTrip(context.Background(), &transport.Request{Endpoint: "/v1/daemon/ack", Body: []byte(body)})
			if err != nil || resp.Status != 200 || string(resp.Body) != echo(body) {
				t.Errorf("request %s: %+v, %v", body, resp, err)
			}
		})
	}
	wg.Wait()
}
