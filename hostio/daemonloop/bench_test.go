package daemonloop

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/shellexec"
	"github.com/nymphd/nymph/hostio/signer"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkBackToBackTrue compares, in one run, spawning `bash -c true`
// directly with running the same command as back-to-back execs through
// the daemon: machine + driver + shellexec against an in-process plane
// that hands out the next exec only once the previous result arrived. The
// daemon's rate divided by the direct rate is the loop's efficiency (goal:
// at least 0.8). wake-µs is the mean time from an exec's exit to the next
// poll reaching the plane. The shellexec line isolates the cost of the
// exec adapter (pipes, process group, capture) from the loop's.
func BenchmarkBackToBackTrue(b *testing.B) {
	if _, err := exec.LookPath("bash"); err != nil {
		b.Skip("bash is needed")
	}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// shellexec alone: what one exec costs before the loop adds anything.
	b.Run("shellexec", func(b *testing.B) {
		b.ReportAllocs()
		opt := shellexec.Options{DefaultWorkdir: b.TempDir()}
		for i := 0; i < b.N; i++ {
			if r := shellexec.Run(context.Background(), wire.Exec{ExecID: "x", Command: "true"}, opt); r.ExitCode != 0 {
				b.Fatalf("%+v", r)
			}
		}
	})
	b.Run("daemon", func(b *testing.B) {
		b.ReportAllocs()
		p := newPlane()
		p.serial = true
		for i := 0; i < b.N; i++ {
			p.queue = append(p.queue, execCmd(fmt.Sprintf("e%d", i), "true", nil))
		}
		// Wake latency: the exit time of the last exec, consumed by the
		// first poll that follows it.
		var lastExit atomic.Int64
		var wakeSum, wakes atomic.Int64
		p.onPoll = func() {
			if t := lastExit.Swap(0); t != 0 {
				wakeSum.Add(time.Now().UnixNano() - t)
				wakes.Add(1)
			}
		}
		opt, sigs := benchOptions(b, p)
		opt.Exec = func(ctx context.Context, ex wire.Exec, o shellexec.Options) wire.ExecResult {
			res := shellexec.Run(ctx, ex, o)
			lastExit.Store(time.Now().UnixNano())
			return res
		}
		// The last result is awaited on a channel, not by polling, so the
		// harness adds no wakeups of its own to the daemon's.
		allDone := make(chan struct{})
		p.onResult = func(n int) {
			if n == b.N {
				close(allDone)
			}
		}
		var wg sync.WaitGroup
		var res Result
		b.ResetTimer()
		wg.Add(1)
		go func() { defer wg.Done(); res = Run(context.Background(), opt) }()
		select {
		case <-allDone:
		case <-time.After(10 * time.Minute):
			var n int
			p.snapshot(func(p *plane) { n = len(p.results) })
			b.Fatalf("only %d of %d execs finished", n, b.N)
		}
		b.StopTimer()
		sigs <- daemon.SignalTerm
		wg.Wait()
		if res.Code != 0 {
			b.Fatalf("daemon exit %+v", res)
		}
		for id, r := range p.results {
			if r.ExitCode != 0 {
				b.Fatalf("exec %s: %+v", id, r)
			}
		}
		if n := wakes.Load(); n > 0 {
			b.ReportMetric(float64(wakeSum.Load())/float64(n)/1e3, "wake-µs")
		}
	})
}

// BenchmarkPairedTrue alternates, in every iteration, one direct `bash -c
// true` and one exec of `true` through the daemon (pushed to the parked
// poll, timed until its result reaches the plane), so that load from
// other processes falls on both alike. rate-ratio is the daemon's exec
// rate over the direct rate (goal: at least 0.8). "signed" is the same
// with every request signed by a host key (hostio/signer), as a joined
// daemon sends them: the cost of signing on the exec rate.
func BenchmarkPairedTrue(b *testing.B) {
	if _, err := exec.LookPath("bash"); err != nil {
		b.Skip("bash is needed")
	}
	b.Run("bearer", func(b *testing.B) { pairedTrue(b, false) })
	b.Run("signed", func(b *testing.B) { pairedTrue(b, true) })
}

func pairedTrue(b *testing.B, signed bool) {
	p := newPlane()
	opt, sigs := benchOptions(b, p)
	if signed {
		_, key, err := ed25519.GenerateKey(crand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		opt.Transport, err = signer.New(signer.Options{Next: p, Key: key, ServerURL: "https://plane.example", Random: crand.Reader})
		if err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan Result, 1)
	go func() { done <- Run(context.Background(), opt) }()
	p.waitUntil(func(p *plane) bool { return len(p.polls) > 0 })
	b.ReportAllocs()
	var direct, viaDaemon time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		id := fmt.Sprintf("p%d", i)
		var parked int
		p.snapshot(func(p *plane) { parked = len(p.polls) })
		p.push(execCmd(id, "true", nil))
		p.waitUntil(func(p *plane) bool { _, ok := p.results[id]; return ok })
		t2 := time.Now()
		// Let the daemon settle before the next direct spawn is timed: it
		// took the exec on the parked poll, polled again at once, and on the
		// exec's exit withdrew that poll for a fresh one. Work of its own
		// still running would otherwise slow the direct side and flatter
		// the ratio.
		p.waitUntil(func(p *plane) bool { return len(p.polls) >= parked+2 })
		direct += t1.Sub(t0)
		viaDaemon += t2.Sub(t1)
	}
	b.StopTimer()
	sigs <- daemon.SignalTerm
	if r := <-done; r.Code != 0 {
		b.Fatalf("daemon exit %+v", r)
	}
	b.ReportMetric(float64(direct.Microseconds())/float64(b.N), "direct-µs/exec")
	b.ReportMetric(float64(viaDaemon.Microseconds())/float64(b.N), "daemon-µs/exec")
	b.ReportMetric(float64(direct)/float64(viaDaemon), "rate-ratio")
}

// benchOptions is the daemon both benchmarks run: a machine on a fresh
// workdir, talking to p, stopped by a signal sent on sigs.
func benchOptions(b *testing.B, p *plane) (opt Options, sigs chan daemon.SignalKind) {
	cfg := daemon.DefaultConfig()
	cfg.MachineID, cfg.Hostname, cfg.Workdir = "bench", "bench", b.TempDir()
	sigs = make(chan daemon.SignalKind, 1)
	return Options{
		Machine:     daemon.New(cfg, rand.New(rand.NewPCG(1, 2))),
		Transport:   p,
		ExecOptions: shellexec.Options{DefaultWorkdir: cfg.Workdir},
		Signals:     sigs,
	}, sigs
}
