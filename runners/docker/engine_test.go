package docker

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/internal/testbuild"
	"github.com/nymphd/nymph/wirecore/wire"
)

var (
	entryOnce sync.Once
	entryDir  string
	entryErr  error
)

// engineImage is a local image with a shell (CI imports busybox as
// bb:latest with .ci/engines.sh); no registry is reachable.
func engineImage() string {
	if img := os.Getenv("NYMPH_TEST_DOCKER_IMAGE"); img != "" {
		return img
	}
	return "bb:latest"
}

// requireDocker skips unless a docker engine answers (DOCKER_HOST) and
// has the test image; it builds the static test entry to bind-mount.
func requireDocker(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker client on PATH (.ci/engines.sh installs one)")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no docker engine answers (DOCKER_HOST=%q): %v %s", os.Getenv("DOCKER_HOST"), err, out)
	}
	if err := exec.Command("docker", "image", "inspect", engineImage()).Run(); err != nil {
		t.Skipf("image %s is not loaded (.ci/engines.sh imports it)", engineImage())
	}
	entryOnce.Do(func() {
		entryDir, entryErr = os.MkdirTemp("", "nymph-docker-entry-")
		if entryErr == nil {
			_, entryErr = testbuild.Entry(entryDir)
		}
	})
	if entryErr != nil {
		t.Fatal(entryErr)
	}
}

func engineRunner(gvisor bool) *Runner {
	opt := Options{Entry: []string{"/nymph-test/testentry"}, KillGrace: time.Second}
	if gvisor {
		return NewGVisor(opt)
	}
	return New(opt)
}

// The behaviour against a real engine is tested in docker_engine_test.go;
// this file measures it.

func engineRun(ctx context.Context, r *Runner, root, id, args string, dc *wire.DockerConfig) runners.Outcome {
	if dc == nil {
		dc = &wire.DockerConfig{}
	}
	dc.Volumes = append(dc.Volumes, entryDir+":/nymph-test:ro")
	reg := runners.NewRegistry(runners.Config{Root: root}, r)
	return reg.ExecuteAs(ctx, r.Kind(), wire.Run{InvocationID: id, ArgsBlob: []byte(args),
		RunConfig: wire.RunConfig{Image: engineImage(), Docker: dc}}, "")
}

// BenchmarkRealDockerToEntry measures a run from Execute to the entry
// program's first instruction (ms-to-entry) and to the outcome (ns/op).
func BenchmarkRealDockerToEntry(b *testing.B) { benchToEntry(b, false) }

// BenchmarkRealGVisorToEntry is the same under runsc.
func BenchmarkRealGVisorToEntry(b *testing.B) {
	if os.Getenv("NYMPH_TEST_RUNSC") == "" {
		b.Skip("runsc is not usable with this docker engine (NYMPH_TEST_RUNSC unset)")
	}
	benchToEntry(b, true)
}

func benchToEntry(b *testing.B, gvisor bool) {
	requireDocker(b)
	r := engineRunner(gvisor)
	root := b.TempDir()
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		o := engineRun(context.Background(), r, root, "bench-"+strconv.Itoa(i), "stamp", nil)
		ns, err := strconv.ParseInt(string(o.ResultBlob), 10, 64)
		if o.State != wire.StateSucceeded || err != nil {
			b.Fatalf("%+v %v", o, err)
		}
		total += time.Unix(0, ns).Sub(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-entry")
}
