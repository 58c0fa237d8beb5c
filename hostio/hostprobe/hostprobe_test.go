package hostprobe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/wirecore/wire"
)

// fakeHost answers commands, files and PATH lookups from maps.
type fakeHost struct {
	mu       sync.Mutex
	commands map[string]string // "name args…" → stdout; absent = failure
	files    map[string]string
	path     map[string]bool
	env      map[string]string
	ran      []string
}

func (f *fakeHost) hostEnv() Env {
	return Env{
		Run: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			key := strings.Join(append([]string{name}, args...), " ")
			f.mu.Lock()
			f.ran = append(f.ran, key)
			f.mu.Unlock()
			if out, ok := f.commands[key]; ok {
				return []byte(out), nil
			}
			return nil, fmt.Errorf("exec: %q: not found", name)
		},
		LookPath: func(name string) (string, error) {
			if f.path[name] {
				return "/usr/bin/" + name, nil
			}
			return "", errors.New("not on PATH")
		},
		ReadFile: func(p string) ([]byte, error) {
			if s, ok := f.files[p]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		Getenv:        func(k string) string { return f.env[k] },
		NumCPU:        func() int { return 3 },
		Timeout:       time.Second,
		DaemonVersion: "0.1.0",
	}
}

const cpuinfo = `processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) CPU @ 2.20GHz

processor	: 1
model name	: Intel(R) Xeon(R) CPU @ 2.20GHz
`

const smiHeader = `+-----------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |
|-------------------------------+----------------------+----------------------+`

func s(v string) *string { return &v }

func TestVersions(t *testing.T) {
	h := &fakeHost{
		commands: map[string]string{
			"runsc --version": "runsc version release-20240101.0\nspec: 1.1.0\n",
			"docker version --format {{.Server.Version}}": "24.0.7\n",
			"python --version":                            "Python 3.11.7\n",
			"uname -sr":                                   "Linux 6.1.0-18-amd64\n",
			"uname -m":                                    "x86_64\n",
			"nvidia-smi --query-gpu=name,driver_version --format=csv,noheader": "NVIDIA A100-SXM4-40GB, 535.104.05\nNVIDIA A100-SXM4-40GB, 535.104.05\n",
			"nvidia-smi": smiHeader,
		},
		files: map[string]string{
			"/etc/os-release": "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
			"/proc/cpuinfo":   cpuinfo,
		},
	}
	got := Probe(context.Background(), h.hostEnv())
	want := wire.Versions{
		Daemon: s("0.1.0"), Protocol: s("1"), Runsc: s("release-20240101.0"), Docker: s("24.0.7"),
		Python: s("3.11.7"), Kernel: s("Linux 6.1.0-18-amd64"), Distro: s("Debian GNU/Linux 12 (bookworm)"),
		Arch: s("x86_64"), CPU: &wire.CPU{Model: "Intel(R) Xeon(R) CPU @ 2.20GHz", Cores: 2},
		GPU: []wire.GPU{
			{Name: "NVIDIA A100-SXM4-40GB", Driver: "535.104.05", CUDA: s("12.2")},
			{Name: "NVIDIA A100-SXM4-40GB", Driver: "535.104.05", CUDA: s("12.2")},
		},
	}
	if diff := cmp.Diff(want, got.Versions); diff != "" {
		t.Fatalf("versions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"host=local"}, got.Tags); diff != "" {
		t.Fatalf("tags (-want +got):\n%s", diff)
	}
	if got.Runners != nil {
		t.Fatalf("runners %v on a local host", got.Runners)
	}
}

func TestVersionsAllMissingAreNull(t *testing.T) {
	h := &fakeHost{}
	got := Probe(context.Background(), h.hostEnv())
	want := wire.Versions{Daemon: s("0.1.0"), Protocol: s("1")}
	if diff := cmp.Diff(want, got.Versions); diff != "" {
		t.Fatalf("versions (-want +got):\n%s", diff)
	}
}

func TestPython3Preferred(t *testing.T) {
	h := &fakeHost{commands: map[string]string{"python3 --version": "Python 3.12.1", "python --version": "Python 2.7.18"}}
	if v := h.hostEnv().python(context.Background()); v == nil || *v != "3.12.1" {
		t.Fatalf("python = %v", v)
	}
}

func TestSlurmDetection(t *testing.T) {
	conf := "# comment\nClusterName=hpc1 # trailing\nSlurmctldHost=ctl\n"
	for _, tc := range []struct {
		name    string
		host    *fakeHost
		tags    []string
		runners []string
	}{
		{"sinfo and conf", &fakeHost{path: map[string]bool{"sinfo": true}, files: map[string]string{"/etc/slurm/slurm.conf": conf}},
			[]string{"host=slurm", "slurm:cluster=hpc1"}, []string{"slurm"}},
		{"SLURM_CONF honoured", &fakeHost{path: map[string]bool{"sinfo": true}, files: map[string]string{"/opt/s.conf": "clustername = x\n"},
			env: map[string]string{"SLURM_CONF": "/opt/s.conf"}}, []string{"host=slurm", "slurm:cluster=x"}, []string{"slurm"}},
		{"conf without sinfo", &fakeHost{files: map[string]string{"/etc/slurm/slurm.conf": conf}}, []string{"host=local"}, nil},
		{"sinfo without conf", &fakeHost{path: map[string]bool{"sinfo": true}}, []string{"host=local"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tags, runners := Detect(context.Background(), tc.host.hostEnv())
			if diff := cmp.Diff(tc.tags, tags); diff != "" {
				t.Errorf("tags (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.runners, runners); diff != "" {
				t.Errorf("runners (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKubeDetection(t *testing.T) {
	h := &fakeHost{path: map[string]bool{"kubectl": true}, commands: map[string]string{
		"kubectl version --client=false --request-timeout=2s --output=json": "{}",
		"kubectl config current-context":                                    "kind-dev\n",
	}}
	tags, runners := Detect(context.Background(), h.hostEnv())
	if diff := cmp.Diff([]string{"host=kube", "kube:context=kind-dev"}, tags); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"kube"}, runners); diff != "" {
		t.Errorf("runners (-want +got):\n%s", diff)
	}
	// kubectl that cannot reach a server does not count.
	h2 := &fakeHost{path: map[string]bool{"kubectl": true}}
	if tags, _ := Detect(context.Background(), h2.hostEnv()); tags[0] != "host=local" {
		t.Errorf("unreachable cluster detected: %v", tags)
	}
}

func TestCloudDetection(t *testing.T) {
	var gcpFlavor string
	mux := http.NewServeMux()
	mux.HandleFunc("/latest/dynamic/instance-identity/document", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"instanceType":"m5.large","region":"eu-west-1","accountId":"1"}`)
	})
	mux.HandleFunc("/computeMetadata/v1/instance/machine-type", func(w http.ResponseWriter, r *http.Request) {
		gcpFlavor = r.Header.Get("Metadata-Flavor")
		if gcpFlavor != "Google" {
			http.Error(w, "missing flavor", http.StatusForbidden)
			return
		}
		fmt.Fprint(w, "projects/123/machineTypes/n2-standard-4")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	defer dead.Close()

	sys := System("x")
	for _, tc := range []struct {
		name     string
		aws, gcp string
		tags     []string
	}{
		{"aws", srv.URL, dead.URL, []string{"host=aws", "aws:instance-type=m5.large", "region=eu-west-1"}},
		{"gcp", dead.URL, srv.URL, []string{"host=gcp", "gcp:machine-type=n2-standard-4"}},
		{"neither", dead.URL, dead.URL, []string{"host=local"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := (&fakeHost{}).hostEnv()
			env.HTTPGet = sys.HTTPGet
			env.AWSBase, env.GCPBase = tc.aws, tc.gcp
			tags, _ := Detect(context.Background(), env)
			if diff := cmp.Diff(tc.tags, tags); diff != "" {
				t.Errorf("tags (-want +got):\n%s", diff)
			}
		})
	}
	if gcpFlavor != "Google" {
		t.Fatalf("GCP probe sent Metadata-Flavor %q", gcpFlavor)
	}
}

func TestProbeTimeout(t *testing.T) {
	env := (&fakeHost{}).hostEnv()
	env.Timeout = 50 * time.Millisecond
	env.Run = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		<-ctx.Done() // a probe that hangs until its deadline
		return nil, ctx.Err()
	}
	env.LookPath = func(string) (string, error) { return "/bin/x", nil }
	done := make(chan Result, 1)
	go func() { done <- Probe(context.Background(), env) }()
	select {
	case r := <-done:
		if r.Versions.Kernel != nil || r.Versions.Docker != nil {
			t.Fatalf("timed-out probes not null: %+v", r.Versions)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Probe did not honour its timeout")
	}
}

func TestMerge(t *testing.T) {
	tags := MergeTags([]string{"host=mine", "zone=a"}, []string{"host=slurm", "slurm:cluster=c", "zone=b", "slurm:cluster=d"})
	if diff := cmp.Diff([]string{"host=mine", "zone=a", "slurm:cluster=c"}, tags); diff != "" {
		t.Errorf("tags (-want +got):\n%s", diff)
	}
	runners := MergeRunners([]string{"docker", "process"}, []string{"slurm", "process"})
	if diff := cmp.Diff([]string{"docker", "process", "slurm"}, runners); diff != "" {
		t.Errorf("runners (-want +got):\n%s", diff)
	}
}

func TestRealCommandRunner(t *testing.T) {
	out, err := runCommand(context.Background(), "sh", "-c", "echo hi")
	if err != nil || strings.TrimSpace(string(out)) != "hi" {
		t.Fatalf("runCommand = %q, %v", out, err)
	}
	if _, err := runCommand(context.Background(), "sh", "-c", "exit 3"); err == nil {
		t.Fatal("non-zero exit not an error")
	}
}
