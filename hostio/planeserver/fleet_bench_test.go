package planeserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/sqlstore"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkFleetLongPoll parks 2,000 daemons' long-polls on one server over
// loopback HTTP (in-process clients, one connection each) and measures,
// per operation, the time from an operator's exec request to the exec
// command arriving at its daemon. Reported: p50 and p99 of that latency,
// with the in-memory store and with the SQLite store `nymph serve` uses
// (every enqueue and delivery durable before it is answered).
func BenchmarkFleetLongPoll(b *testing.B) {
	b.Run("store=memory", func(b *testing.B) { fleetLongPoll(b, NewMemStore()) })
	b.Run("store=sqlite", func(b *testing.B) {
		st, err := sqlstore.Open(context.Background(), b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		fleetLongPoll(b, st)
	})
}

func fleetLongPoll(b *testing.B, store Store) {
	const fleet = 2000
	ts := newTestServer(b, store, nil)
	tr := &http.Transport{MaxIdleConnsPerHost: fleet + 16, IdleConnTimeout: 2 * time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}

	ids := make([]string, fleet)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < fleet; i += 16 {
				id, err := benchHello(client, ts.http.URL, fmt.Sprintf("bench-%d", i))
				if err != nil {
					b.Error(err)
					return
				}
				ids[i] = id
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}

	type arrival struct {
		execID string
		at     time.Time
	}
	arrivals := make([]chan arrival, fleet)
	ctx, cancel := context.WithCancel(context.Background())
	var daemons sync.WaitGroup
	for i := range fleet {
		arrivals[i] = make(chan arrival, 4)
		daemons.Go(func() {
			for ctx.Err() == nil {
				resp, err := benchPoll(ctx, client, ts.http.URL, ids[i])
				now := time.Now()
				if err != nil {
					continue
				}
				for _, c := range resp.Commands {
					if d, ok := wire.Dispatch(c).(wire.ExecCommand); ok {
						arrivals[i] <- arrival{d.Body.ExecID, now}
					}
				}
			}
		})
	}
	ts.waitParked(fleet)

	lat := make([]time.Duration, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := (i * 7919) % fleet
		start := time.Now()
		execID, err := benchExec(client, ts.http.URL, ids[k])
		if err != nil {
			b.Fatal(err)
		}
		a := <-arrivals[k]
		if a.execID != execID {
			b.Fatalf("daemon %d got exec %s, want %s", k, a.execID, execID)
		}
		lat = append(lat, a.at.Sub(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(fleet, "parked-polls")
	cancel()
	ts.close() // answers the parked polls, so every daemon returns
	daemons.Wait()
}

func benchHello(c *http.Client, base, machine string) (string, error) {
	body, _ := helloBody(machine).MarshalMsg(nil)
	b, err := benchPost(context.Background(), c, base+wire.PathHello, wire.ContentTypeMsgpack, "Bearer "+daemonToken, body)
	if err != nil {
		return "", err
	}
	var resp wire.HelloResponse
	if _, err := resp.UnmarshalMsg(b); err != nil || resp.WorkerID == nil {
		return "", fmt.Errorf("hello %s: %v", machine, err)
	}
	return *resp.WorkerID, nil
}

func benchPoll(ctx context.Context, c *http.Client, base, worker string) (wire.PollResponse, error) {
	body, _ := (&wire.PollRequest{WorkerID: worker, TimeoutS: 20}).MarshalMsg(nil)
	var resp wire.PollResponse
	b, err := benchPost(ctx, c, base+wire.PathPoll, wire.ContentTypeMsgpack, "Bearer "+daemonToken, body)
	if err != nil {
		return resp, err
	}
	_, err = resp.UnmarshalMsg(b)
	return resp, err
}

func benchExec(c *http.Client, base, worker string) (string, error) {
	body, _ := json.Marshal(operator.ExecRequest{Command: "true"})
	b, err := benchPost(context.Background(), c, base+idPath(operator.PathExec, worker), wire.ContentTypeJSON, "Bearer "+adminToken, body)
	if err != nil {
		return "", err
	}
	var acc operator.ExecAccepted
	return acc.ExecID, json.Unmarshal(b, &acc)
}

func benchPost(ctx context.Context, c *http.Client, url, ctype, auth string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", auth)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("POST %s: %d %q", url, resp.StatusCode, b)
	}
	return b, err
}
