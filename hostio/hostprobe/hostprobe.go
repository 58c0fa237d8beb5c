// Package hostprobe finds out, once at boot, what host the daemon runs on: the
// versions reported in hello (docs/protocol.md, "Versions") and the host
// context — SLURM, Kubernetes, AWS, GCP or local — that adds tags and runners
// (docs/architecture.md, "How a daemon behaves": boot).
//
// It decides how each fact is probed and parsed, that every probe is
// best-effort (a failure is null, never an error) and bounded by a short
// timeout, and how detected tags and runners merge with configured ones.
// It does not decide when to probe: the driver runs it at boot and again
// when a setup asks for refreshed capabilities. Every outside contact goes
// through Env, so tests never reach a real command or metadata address.
package hostprobe

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// DefaultTimeout bounds each probe.
const DefaultTimeout = 2 * time.Second

// Metadata service base URLs of the clouds.
const (
	AWSMetadataBase = "http://169.254.169.254"
	GCPMetadataBase = "http://metadata.google.internal"
)

// ProtocolVersion is the protocol the daemon speaks.
const ProtocolVersion = "1"

// Env is every outside contact a probe makes.
type Env struct {
	// Run runs a program and returns its stdout; a non-zero exit, a missing
	// program or the context's end is an error.
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
	// LookPath finds a program on PATH.
	LookPath func(name string) (string, error)
	ReadFile func(path string) ([]byte, error)
	Getenv   func(key string) string
	// HTTPGet fetches url with the given headers and returns the body of a
	// 200 answer; any other status is an error.
	HTTPGet func(ctx context.Context, url string, headers map[string]string) ([]byte, error)
	NumCPU  func() int
	// AWSBase and GCPBase are the metadata services' base URLs.
	AWSBase, GCPBase string
	Timeout          time.Duration
	// DaemonVersion is reported as versions.daemon.
	DaemonVersion string
}

// System returns the Env of the real machine.
func System(daemonVersion string) Env {
	return Env{
		Run:           runCommand,
		LookPath:      exec.LookPath,
		ReadFile:      os.ReadFile,
		Getenv:        os.Getenv,
		HTTPGet:       httpGet(&http.Client{}),
		NumCPU:        runtime.NumCPU,
		AWSBase:       AWSMetadataBase,
		GCPBase:       GCPMetadataBase,
		Timeout:       DefaultTimeout,
		DaemonVersion: daemonVersion,
	}
}

// Result is what the probes found.
type Result struct {
	Versions wire.Versions
	// Tags are "key=value"; the host= tag is always present.
	Tags []string
	// Runners are the runner kinds the host context offers (slurm, kube).
	Runners []string
}

// Probe runs every version probe and every host detector in parallel and
// waits for all of them; each is bounded by env.Timeout.
func Probe(ctx context.Context, env Env) Result {
	var res Result
	var wg sync.WaitGroup
	run := env.starter(ctx, &wg)
	v := &res.Versions
	v.Daemon = ptr(env.DaemonVersion)
	v.Protocol = ptr(ProtocolVersion)
	run(func(c context.Context) { v.Runsc = env.runsc(c) })
	run(func(c context.Context) { v.Docker = env.docker(c) })
	run(func(c context.Context) { v.Python = env.python(c) })
	run(func(c context.Context) { v.Kernel = env.firstLine(c, "uname", "-sr") })
	run(func(c context.Context) { v.Arch = env.firstLine(c, "uname", "-m") })
	run(func(c context.Context) { v.Distro = env.distro() })
	run(func(c context.Context) { v.CPU = env.cpu() })
	run(func(c context.Context) { v.GPU = env.gpu(c) })
	det := env.detectAll(ctx, run)
	wg.Wait()
	res.Tags, res.Runners = det.collect()
	return res
}

// Detect runs only the host detectors (for a capabilities refresh).
func Detect(ctx context.Context, env Env) (tags, runners []string) {
	var wg sync.WaitGroup
	det := env.detectAll(ctx, env.starter(ctx, &wg))
	wg.Wait()
	return det.collect()
}

// starter returns a function that runs a probe in a goroutine wg counts,
// bounded by env.Timeout.
func (e Env) starter(ctx context.Context, wg *sync.WaitGroup) func(func(context.Context)) {
	return func(f func(context.Context)) {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, e.timeout())
			defer cancel()
			f(pctx)
		})
	}
}

// detections holds each detector's finding in a fixed slot, so the merged
// order does not depend on which goroutine finished first.
type detections struct {
	slurm, kube, aws, gcp detection
}

type detection struct {
	tags   []string
	runner string
}

func (e Env) detectAll(_ context.Context, run func(func(context.Context))) *detections {
	d := &detections{}
	run(func(c context.Context) { d.slurm = e.slurm(c) })
	run(func(c context.Context) { d.kube = e.kube(c) })
	run(func(c context.Context) { d.aws = e.aws(c) })
	run(func(c context.Context) { d.gcp = e.gcp(c) })
	return d
}

// collect orders detections slurm, kube, aws, gcp; host=local is added
// when none fired.
func (d *detections) collect() (tags, runners []string) {
	for _, x := range []detection{d.slurm, d.kube, d.aws, d.gcp} {
		tags = MergeTags(tags, x.tags)
		if x.runner != "" {
			runners = MergeRunners(runners, []string{x.runner})
		}
	}
	if len(tags) == 0 {
		tags = []string{"host=local"}
	}
	return tags, runners
}

// MergeTags keeps every configured tag and appends each detected tag whose
// key is not yet present: configuration wins on a key collision.
func MergeTags(configured, detected []string) []string {
	out := append([]string(nil), configured...)
	seen := make(map[string]bool, len(out)+len(detected))
	for _, t := range out {
		seen[tagKey(t)] = true
	}
	for _, t := range detected {
		if k := tagKey(t); !seen[k] {
			seen[k] = true
			out = append(out, t)
		}
	}
	return out
}

func tagKey(t string) string {
	k, _, _ := strings.Cut(t, "=")
	return k
}

// MergeRunners keeps the configured list as is and appends detected kinds
// it lacks.
func MergeRunners(configured, detected []string) []string {
	out := append([]string(nil), configured...)
	for _, r := range detected {
		found := false
		for _, c := range out {
			if c == r {
				found = true
				break
			}
		}
		if !found {
			out = append(out, r)
		}
	}
	return out
}

func (e Env) timeout() time.Duration {
	if e.Timeout <= 0 {
		return DefaultTimeout
	}
	return e.Timeout
}

func ptr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	// A probe whose child left a grandchild holding stdout must still end.
	cmd.WaitDelay = 500 * time.Millisecond
	err := cmd.Run()
	return out.Bytes(), err
}
