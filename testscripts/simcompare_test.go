//go:build linux

package testscripts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/sim"
	"github.com/pelletier/go-toml/v2"
)

// simCompareScenario is the scenario run both ways: by `nymph sim` and for
// real.
const simCompareScenario = "testdata/simcompare.toml"

// BenchmarkSimVersusReal runs one scenario twice: for real — a `nymph
// serve` on loopback (plain HTTP, the sqlite store) and one `nymph daemon`
// process per simulated daemon, the operator's execs posted at the
// scenario's Poisson rate to uniformly drawn workers — and in `nymph sim`.
// It prints the figures of both side by side (docs/architecture.md,
// "Against the real thing"). The real run takes the scenario's duration
// of wall time (five minutes), so `make test` does not run it:
//
//	go test ./testscripts/ -run '^$' -bench SimVersusReal -benchtime 1x
//
// NYMPH_SIMCOMPARE_DURATION (say 30s) shortens both runs.
//
// How each figure is measured for real:
//   - polls/s: every daemon's own count of the polls it sent
//     (nymph_polls_total on its [introspect] /metrics), summed over the
//     fleet, from the start of the workload to its end, over the wall
//     time between the two scrapes; serve counts no requests itself. No
//     poll failed (nymph_poll_errors_total is printed), so every one
//     reached the plane, which is what the simulator counts.
//   - dispatch latency: from the moment the operator's POST /exec left
//     (the sim's operator costs nothing: its exec is queued the instant
//     it asks) to the daemon's "exec start" log line (a debug line the
//     driver writes when it acts on the machine's StartExec, the effect
//     the simulator times). One machine, one clock.
//   - completions: execs that ended with exit 0 by the end of the window
//     (nymph_execs_total{outcome="ok"}), as the sim counts execs whose
//     work ended uncancelled.
//
// The whole run is the work measured: b.N is not looped over.
func BenchmarkSimVersusReal(b *testing.B) {
	sc := readCompareScenario(b)
	if d := os.Getenv("NYMPH_SIMCOMPARE_DURATION"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil {
			b.Fatalf("NYMPH_SIMCOMPARE_DURATION: %v", err)
		}
		sc.window = max(v.Round(sc.sampleEvery), sc.sampleEvery)
	}
	bin := filepath.Join(binDir, "nymph")
	scenarioPath, err := filepath.Abs(simCompareScenario)
	if err != nil {
		b.Fatal(err)
	}

	simFig := runSimSide(b, bin, scenarioPath, sc)
	realFig := runRealSide(b, bin, sc)

	report := func(name string, real, sim float64) {
		b.ReportMetric(real, "real-"+name)
		b.ReportMetric(sim, "sim-"+name)
	}
	report("polls/s", realFig.pollRate, simFig.pollRate)
	report("polls/exec", realFig.pollsPerExec(sc), simFig.pollsPerExec(sc))
	report("results/s", realFig.resultRate, simFig.resultRate)
	report("dispatch-p50-ms", ms(realFig.p50), ms(simFig.p50))
	report("dispatch-p99-ms", ms(realFig.p99), ms(simFig.p99))
	report("dispatch-max-ms", ms(realFig.max), ms(simFig.max))
	report("started", float64(realFig.started), float64(simFig.started))
	report("completions", float64(realFig.completed), float64(simFig.completed))

	var out strings.Builder
	fmt.Fprintf(&out, "\nscenario %s: %d daemons, %s, %.1f execs/s of `true`, seed %d\n\n",
		filepath.Base(simCompareScenario), sc.daemons, sc.window, sc.execRate, sc.seed)
	fmt.Fprintf(&out, "| %-36s | %12s | %12s |\n", "figure", "real", "sim")
	fmt.Fprintf(&out, "|%s|%s|%s|\n", strings.Repeat("-", 38), strings.Repeat("-", 14), strings.Repeat("-", 14))
	row := func(name, real, sim string) { fmt.Fprintf(&out, "| %-36s | %12s | %12s |\n", name, real, sim) }
	row("polls/s", f1(realFig.pollRate), f1(simFig.pollRate))
	row("polls per exec over the idle rate", f2(realFig.pollsPerExec(sc)), f2(simFig.pollsPerExec(sc)))
	row("exec results posted/s", f1(realFig.resultRate), f1(simFig.resultRate))
	row("execs started", strconv.Itoa(realFig.started), strconv.Itoa(simFig.started))
	row("execs completed", strconv.Itoa(realFig.completed), strconv.Itoa(simFig.completed))
	row("dispatch latency p50", msText(realFig.p50), msText(simFig.p50))
	row("dispatch latency p99", msText(realFig.p99), msText(simFig.p99))
	row("dispatch latency max", msText(realFig.max), msText(simFig.max))
	fmt.Fprintf(&out, "\nreal only: operator POST /exec round trip p50 %s, p99 %s; `true` ran p50 %d ms, p99 %d ms (duration_ms)\n",
		msText(realFig.postP50), msText(realFig.postP99), realFig.execP50MS, realFig.execP99MS)
	fmt.Fprintf(&out, "real only: execs enqueued %d, finished at the plane (exit 0) %d; poll errors %d, hellos in the window %d, results failed %d\n",
		realFig.enqueued, realFig.planeFinished, realFig.pollErrors, realFig.hellos, realFig.resultsFailed)
	fmt.Fprintf(&out, "real only: CPU over the window: serve %.1f%% of a core, the %d daemons %.1f%% together; fleet up in %s\n",
		realFig.serveCPU, sc.daemons, realFig.daemonCPU, realFig.bootTook.Round(time.Millisecond))
	fmt.Fprint(os.Stdout, out.String())
}

// compareScenario is what the harness needs of the scenario file; the
// rest (poll settings, latency model) is the sim's and the binaries'
// defaults, the same on both sides.
type compareScenario struct {
	seed    uint64
	daemons int
	// window is the measured span: the scenario's duration after its
	// boot_spread (the simulated fleet's boot; the real fleet is up
	// before its window opens).
	window, bootSpread, sampleEvery time.Duration
	execRate                        float64
}

func readCompareScenario(b *testing.B) compareScenario {
	data, err := os.ReadFile(simCompareScenario)
	if err != nil {
		b.Fatal(err)
	}
	var f struct {
		Seed        uint64 `toml:"seed"`
		Daemons     int    `toml:"daemons"`
		Duration    string `toml:"duration"`
		SampleEvery string `toml:"sample_every"`
		BootSpread  string `toml:"boot_spread"`
		Workload    struct {
			ExecRate float64 `toml:"exec_rate"`
		} `toml:"workload"`
	}
	if err := toml.Unmarshal(data, &f); err != nil {
		b.Fatalf("%s: %v", simCompareScenario, err)
	}
	d, err1 := time.ParseDuration(f.Duration)
	every, err2 := time.ParseDuration(f.SampleEvery)
	boot, err3 := time.ParseDuration(f.BootSpread)
	if err1 != nil || err2 != nil || err3 != nil || f.Daemons < 1 || f.Workload.ExecRate <= 0 ||
		every <= 0 || boot%every != 0 || d <= boot {
		b.Fatalf("%s: want seed, daemons, duration, sample_every, boot_spread (a multiple of sample_every) and workload.exec_rate",
			simCompareScenario)
	}
	return compareScenario{seed: f.Seed, daemons: f.Daemons, window: d - boot, bootSpread: boot, sampleEvery: every,
		execRate: f.Workload.ExecRate}
}

// figures are one side's measurements.
type figures struct {
	pollRate, resultRate float64
	// execRate is the execs started per second over the window the rates
	// cover: the draw of the Poisson arrivals, which differs between the
	// two sides.
	execRate           float64
	started, completed int
	p50, p99, max      time.Duration

	// The real side only.
	postP50, postP99     time.Duration
	execP50MS, execP99MS int64
	pollErrors, hellos   uint64
	resultsFailed        uint64
	enqueued             int
	planeFinished        int
	serveCPU, daemonCPU  float64
	bootTook             time.Duration
}

// idlePoll is how long an idle daemon's poll is parked: wait_max_s and
// the plane's poll cap, 20 s by default on both sides. An idle fleet of N
// polls N/20 times a second.
const idlePoll = plane.DefaultPollCap

// pollsPerExec is the polls an exec adds to the idle fleet's: the poll
// that carried it ends early, and its end wakes the daemon to poll again.
// It takes out the Poisson draw, which differs between the two sides.
func (f figures) pollsPerExec(sc compareScenario) float64 {
	if f.execRate == 0 {
		return 0
	}
	return (f.pollRate - float64(sc.daemons)/idlePoll.Seconds()) / f.execRate
}

// ---------------------------------------------------------------- the sim

func runSimSide(b *testing.B, bin, scenario string, sc compareScenario) figures {
	dir := b.TempDir()
	cmd := exec.Command(bin, "sim", "--scenario", scenario, "--duration", (sc.bootSpread + sc.window).String(), "--out", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("nymph sim: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "summary.txt"))
	if err != nil {
		b.Fatal(err)
	}
	line := func(key string) []string {
		for l := range strings.Lines(string(data)) {
			if rest, ok := strings.CutPrefix(l, key+" "); ok {
				return strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '/' || r == '\n' })
			}
		}
		b.Fatalf("summary.txt has no %q line:\n%s", key, data)
		return nil
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			b.Fatalf("summary.txt: %q is not a number", s)
		}
		return v
	}
	lat := line("dispatch latency p50 / p99 / max") // "2.0 ms 6.4 ms 8.9 ms"
	msDur := func(s string) time.Duration { return time.Duration(num(s) * float64(time.Millisecond)) }
	fig := figures{p50: msDur(lat[0]), p99: msDur(lat[2]), max: msDur(lat[4])}

	// Everything else comes from the time series after the boot: the
	// rows whose window starts at boot_spread or later.
	csv, err := os.ReadFile(filepath.Join(dir, "timeseries.csv"))
	if err != nil {
		b.Fatal(err)
	}
	var polls, results, span float64
	last := 0.0
	for r := range strings.Lines(string(csv)) {
		c := strings.Split(strings.TrimSpace(r), ",")
		if c[0] == "t_s" {
			continue
		}
		t := num(c[0])
		w := t - last
		last = t
		if t <= sc.bootSpread.Seconds() {
			continue
		}
		polls += num(c[3]) * w
		results += num(c[4]) * w
		fig.started += int(num(c[13]))
		fig.completed += int(num(c[14]))
		span += w
	}
	if span == 0 {
		b.Fatal("timeseries.csv has no row after the boot")
	}
	fig.pollRate, fig.resultRate, fig.execRate = polls/span, results/span, float64(fig.started)/span
	return fig
}

// ---------------------------------------------------------------- for real

// fleet is serve and the daemons, with what is needed to stop them.
type fleet struct {
	mu    sync.Mutex
	procs []*exec.Cmd
	waits []chan struct{}
}

func (f *fleet) start(b *testing.B, cmd *exec.Cmd, logPath string) {
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Should the benchmark die, the kernel ends its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		b.Fatalf("start %s: %v", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, cmd)
	f.waits = append(f.waits, done)
	f.mu.Unlock()
}

// stop sends SIGTERM to every process it started, daemons first (they
// drain at once: nothing runs), serve last, and SIGKILLs whatever is
// still there after ten seconds.
func (f *fleet) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.procs) - 1; i >= 0; i-- {
		f.procs[i].Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(10 * time.Second)
	for i, done := range f.waits {
		select {
		case <-done:
		case <-deadline:
			f.procs[i].Process.Kill()
			<-done
		}
	}
}

// cpuTicks is a process's user plus system time, in clock ticks.
func cpuTicks(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	rest := string(data[bytes.LastIndexByte(data, ')')+2:])
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(fields[11], 64)
	s, _ := strconv.ParseFloat(fields[12], 64)
	return u + s
}

// clockTicks is USER_HZ, which is 100 on every Linux this runs on.
const clockTicks = 100

type scrape struct {
	polls, pollErrors, hellos, execsOK, resultsFailed uint64
}

func scrapeOne(hc *http.Client, port int) (scrape, error) {
	resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err != nil {
		return scrape{}, err
	}
	defer resp.Body.Close()
	var s scrape
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "nymph_polls_total":
			s.polls = v
		case "nymph_poll_errors_total":
			s.pollErrors = v
		case "nymph_hellos_total":
			s.hellos = v
		case `nymph_execs_total{outcome="ok"}`:
			s.execsOK = v
		case "nymph_results_failed_total":
			s.resultsFailed = v
		}
	}
	return s, sc.Err()
}

// scrapeAll sums every daemon's counters, scraped at once.
func scrapeAll(b *testing.B, hc *http.Client, ports []int) scrape {
	var (
		mu    sync.Mutex
		sum   scrape
		first error
		wg    sync.WaitGroup
	)
	for _, p := range ports {
		wg.Go(func() {
			s, err := scrapeOne(hc, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			sum.polls += s.polls
			sum.pollErrors += s.pollErrors
			sum.hellos += s.hellos
			sum.execsOK += s.execsOK
			sum.resultsFailed += s.resultsFailed
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatalf("scrape daemon metrics: %v", first)
	}
	return sum
}

type sent struct {
	worker string
	at     time.Time // the POST left
	rtt    time.Duration
	execID string
}

func runRealSide(b *testing.B, bin string, sc compareScenario) figures {
	root := b.TempDir()
	port, err := freePort()
	if err != nil {
		b.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	f := &fleet{}
	b.Cleanup(f.stop)

	data := filepath.Join(root, "serve")
	f.start(b, exec.Command(bin, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data, "--insecure-http"),
		filepath.Join(root, "serve.log"))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	waitUntil(b, "serve /healthz", func() bool {
		resp, err := hc.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var token []byte
	waitUntil(b, "serve's admin token", func() bool {
		token, err = os.ReadFile(filepath.Join(data, "admin.token"))
		return err == nil && len(bytes.TrimSpace(token)) > 0
	})
	bearer := "Bearer " + string(bytes.TrimSpace(token))

	bootStart := time.Now()
	ports := make([]int, sc.daemons)
	logs := make([]string, sc.daemons)
	for i := range sc.daemons {
		if ports[i], err = freePort(); err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(root, fmt.Sprintf("d%03d", i))
		if err := os.MkdirAll(filepath.Join(dir, "work"), 0o755); err != nil {
			b.Fatal(err)
		}
		conf := fmt.Sprintf(`[server]
url = %q
[daemon]
machine_id = "cmp-%03d"
[runtime]
workdir = %q
runners = ["process"]
[introspect]
enabled = true
listen = "127.0.0.1:%d"
[log]
format = "json"
level = "debug"
`, base, i, filepath.Join(dir, "work"), ports[i])
		confPath := filepath.Join(dir, "daemon.toml")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "daemon", "--config", confPath)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NYMPH_CLOUD_METADATA=off")
		logs[i] = filepath.Join(dir, "daemon.log")
		f.start(b, cmd, logs[i])
	}

	var workers []string
	waitUntilFor(b, "every daemon active", 3*time.Minute, func() bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/admin/workers", nil)
		req.Header.Set("Authorization", bearer)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ws []struct {
			ID        string `json:"id"`
			MachineID string `json:"machine_id"`
			State     string `json:"state"`
		}
		if json.NewDecoder(resp.Body).Decode(&ws) != nil {
			return false
		}
		workers = workers[:0]
		for _, w := range ws {
			if w.State == "active" && strings.HasPrefix(w.MachineID, "cmp-") {
				workers = append(workers, w.ID)
			}
		}
		return len(workers) == sc.daemons
	})
	bootTook := time.Since(bootStart)
	slices.Sort(workers) // the draw below depends on the seed alone
	// Let every daemon's first poll settle before the window opens.
	time.Sleep(2 * time.Second)

	pids := func() (serve int, daemons []int) {
		for i, c := range f.procs {
			if i == 0 {
				serve = c.Process.Pid
			} else {
				daemons = append(daemons, c.Process.Pid)
			}
		}
		return serve, daemons
	}
	servePid, daemonPids := pids()
	cpu := func() (serve, daemons float64) {
		serve = cpuTicks(servePid)
		for _, p := range daemonPids {
			daemons += cpuTicks(p)
		}
		return serve, daemons
	}

	// The window: the operator's Poisson arrivals to uniformly drawn
	// workers, as the sim's operator makes them.
	s0 := scrapeAll(b, hc, ports)
	serveCPU0, daemonCPU0 := cpu()
	t0 := time.Now()
	end := t0.Add(sc.window)
	rng := rand.New(rand.NewPCG(sc.seed, 0x7265616c))
	var (
		mu      sync.Mutex
		posts   []sent
		failed  int
		inwg    sync.WaitGroup
		request = func(worker string, at time.Time) {
			body := strings.NewReader(`{"command":"true"}`)
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/admin/workers/"+worker+"/exec", body)
			req.Header.Set("Authorization", bearer)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			rtt := time.Since(at)
			var acc struct {
				ExecID string `json:"exec_id"`
			}
			ok := err == nil && resp.StatusCode/100 == 2
			if err == nil {
				ok = ok && json.NewDecoder(resp.Body).Decode(&acc) == nil && acc.ExecID != ""
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				failed++
				return
			}
			posts = append(posts, sent{worker: worker, at: at, rtt: rtt, execID: acc.ExecID})
		}
	)
	next := t0
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / sc.execRate * float64(time.Second)))
		if !next.Before(end) {
			break
		}
		worker := workers[rng.IntN(len(workers))]
		time.Sleep(time.Until(next))
		inwg.Go(func() { request(worker, time.Now()) })
	}
	time.Sleep(time.Until(end))
	s1 := scrapeAll(b, hc, ports)
	serveCPU1, daemonCPU1 := cpu()
	window := time.Since(t0)
	inwg.Wait()
	if failed > 0 {
		b.Errorf("%d operator POST /exec failed", failed)
	}

	// Each exec's start, from the daemons' logs.
	started := map[string]time.Time{}
	for _, p := range logs {
		fh, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		scan := bufio.NewScanner(fh)
		scan.Buffer(make([]byte, 64<<10), 16<<20)
		for scan.Scan() {
			if !bytes.Contains(scan.Bytes(), []byte(`"msg":"exec start"`)) {
				continue
			}
			var l struct {
				Time   time.Time `json:"time"`
				ExecID string    `json:"exec_id"`
			}
			if json.Unmarshal(scan.Bytes(), &l) == nil {
				started[l.ExecID] = l.Time
			}
		}
		fh.Close()
	}
	var lat, rtts []int64
	for _, p := range posts {
		rtts = append(rtts, int64(p.rtt))
		if at, ok := started[p.execID]; ok && at.Before(end) {
			lat = append(lat, int64(at.Sub(p.at)))
		}
	}
	slices.Sort(lat)
	slices.Sort(rtts)

	// What the plane recorded of each exec: its state and how long `true`
	// ran. A few seconds let the last results land.
	time.Sleep(2 * time.Second)
	var durs []int64
	finished := 0
	for _, p := range posts {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/admin/execs/"+p.execID, nil)
		req.Header.Set("Authorization", bearer)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var st struct {
			State  string `json:"state"`
			Result *struct {
				ExitCode   int64 `json:"exit_code"`
				DurationMS int64 `json:"duration_ms"`
			} `json:"result"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil && st.State == "finished" && st.Result != nil && st.Result.ExitCode == 0 {
			finished++
			durs = append(durs, st.Result.DurationMS)
		}
	}
	slices.Sort(durs)

	secs := window.Seconds()
	completed := int(s1.execsOK - s0.execsOK)
	return figures{
		pollRate:      float64(s1.polls-s0.polls) / secs,
		execRate:      float64(len(lat)) / secs,
		resultRate:    float64(completed) / secs,
		started:       len(lat),
		enqueued:      len(posts),
		completed:     completed,
		p50:           sim.Percentile(lat, 0.50),
		p99:           sim.Percentile(lat, 0.99),
		max:           sim.Percentile(lat, 1),
		postP50:       sim.Percentile(rtts, 0.50),
		postP99:       sim.Percentile(rtts, 0.99),
		execP50MS:     int64(sim.Percentile(durs, 0.50)),
		execP99MS:     int64(sim.Percentile(durs, 0.99)),
		pollErrors:    s1.pollErrors - s0.pollErrors,
		hellos:        s1.hellos - s0.hellos,
		resultsFailed: s1.resultsFailed - s0.resultsFailed,
		planeFinished: finished,
		serveCPU:      100 * (serveCPU1 - serveCPU0) / clockTicks / secs,
		daemonCPU:     100 * (daemonCPU1 - daemonCPU0) / clockTicks / secs,
		bootTook:      bootTook,
	}
}

func waitUntil(b *testing.B, what string, ok func() bool) {
	waitUntilFor(b, what, waitDeadline, ok)
}

func waitUntilFor(b *testing.B, what string, limit time.Duration, ok func() bool) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for !ok() {
		select {
		case <-ctx.Done():
			b.Fatalf("%s: not reached after %s", what, limit)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msText(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return strconv.FormatFloat(ms(d), 'f', 1, 64) + " ms"
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
