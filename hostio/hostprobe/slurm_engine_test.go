package hostprobe_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/hostprobe"
)

// realSlurmConf skips unless a SLURM controller answers here, and returns
// the slurm.conf path the detector reads and the cluster name the running
// controller reports (CI starts one with .ci/engines.sh).
func realSlurmConf(t *testing.T) (conf, cluster string) {
	t.Helper()
	if _, err := exec.LookPath("sinfo"); err != nil {
		t.Skip("no SLURM here: sinfo is not on PATH (.ci/engines.sh start installs one)")
	}
	conf = os.Getenv("SLURM_CONF")
	if conf == "" {
		conf = "/etc/slurm/slurm.conf"
	}
	if _, err := os.Stat(conf); err != nil {
		t.Skipf("no SLURM configuration here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "scontrol", "show", "config").Output()
	if err != nil {
		t.Skipf("no SLURM controller answers (scontrol show config): %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "ClusterName" {
			return conf, strings.TrimSpace(v)
		}
	}
	t.Fatalf("scontrol show config has no ClusterName:\n%s", out)
	return "", ""
}

// noNetwork keeps the cloud detectors off the network: tests reach only
// loopback, and a metadata address is not one.
func noNetwork(context.Context, string, map[string]string) ([]byte, error) {
	return nil, errors.New("no metadata service in tests")
}

// TestDetectRealSlurm checks the SLURM detector against the real sinfo and
// slurm.conf: the cluster name it reads from the file must be the one the
// running controller reports.
func TestDetectRealSlurm(t *testing.T) {
	_, cluster := realSlurmConf(t)
	env := hostprobe.System("test")
	env.HTTPGet = noNetwork

	tags, runners := hostprobe.Detect(context.Background(), env)
	for _, want := range []string{"host=slurm", "slurm:cluster=" + cluster} {
		if !slices.Contains(tags, want) {
			t.Errorf("tags %q lack %q", tags, want)
		}
	}
	if slices.Contains(tags, "host=local") {
		t.Errorf("tags %q carry host=local next to a SLURM detection", tags)
	}
	if !slices.Contains(runners, "slurm") {
		t.Errorf("runners %q lack slurm", runners)
	}
}

// TestProbeRealSlurmMergesUnderConfig checks the whole boot probe on this
// host: a configured host= tag wins over the detected one, the detected
// cluster tag is still added, and the configured runner list stays first.
func TestProbeRealSlurmMergesUnderConfig(t *testing.T) {
	_, cluster := realSlurmConf(t)
	env := hostprobe.System("test")
	env.HTTPGet = noNetwork

	res := hostprobe.Probe(context.Background(), env)
	tags := hostprobe.MergeTags([]string{"host=lab"}, res.Tags)
	if !slices.Contains(tags, "host=lab") || slices.Contains(tags, "host=slurm") {
		t.Errorf("configured host=lab should win: %q", tags)
	}
	if !slices.Contains(tags, "slurm:cluster="+cluster) {
		t.Errorf("tags %q lack slurm:cluster=%s", tags, cluster)
	}
	runners := hostprobe.MergeRunners([]string{"process", "docker"}, res.Runners)
	if want := []string{"process", "docker", "slurm"}; !slices.Equal(runners[:min(3, len(runners))], want) {
		t.Errorf("runners = %q, want %q first", runners, want)
	}
}
