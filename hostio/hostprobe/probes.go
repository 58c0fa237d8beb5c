package hostprobe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/nymphd/nymph/wirecore/wire"
)

// output runs a probe command and returns its trimmed stdout, or "" when
// it failed in any way.
func (e Env) output(ctx context.Context, name string, args ...string) string {
	if e.Run == nil {
		return ""
	}
	out, err := e.Run(ctx, name, args...)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func (e Env) firstLine(ctx context.Context, name string, args ...string) *string {
	line, _, _ := strings.Cut(e.output(ctx, name, args...), "\n")
	return ptr(strings.TrimSpace(line))
}

// runsc prints "runsc version release-20240101.0" on its first line; the
// version is what follows "version".
func (e Env) runsc(ctx context.Context) *string {
	line := e.firstLine(ctx, "runsc", "--version")
	if line == nil {
		return nil
	}
	if _, v, ok := strings.Cut(*line, "version "); ok {
		return ptr(strings.TrimSpace(v))
	}
	return line
}

// docker reports the server's version: a client without a reachable
// daemon exits non-zero and counts as absent.
func (e Env) docker(ctx context.Context) *string {
	return e.firstLine(ctx, "docker", "version", "--format", "{{.Server.Version}}")
}

// python reports the bare version ("3.11.7") of python3, else python.
func (e Env) python(ctx context.Context) *string {
	for _, name := range []string{"python3", "python"} {
		if v := parsePython(e.output(ctx, name, "--version")); v != "" {
			return &v
		}
	}
	return nil
}

func parsePython(out string) string {
	line, _, _ := strings.Cut(out, "\n")
	f := strings.Fields(line)
	if len(f) >= 2 && strings.EqualFold(f[0], "python") {
		return f[1]
	}
	return ""
}

// distro is PRETTY_NAME from /etc/os-release, unquoted.
func (e Env) distro() *string {
	data, err := e.readFile("/etc/os-release")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
			return ptr(strings.Trim(strings.TrimSpace(v), `"'`))
		}
	}
	return nil
}

// cpu reads the model and the count of logical cores from /proc/cpuinfo.
func (e Env) cpu() *wire.CPU {
	data, err := e.readFile("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	model, cores := parseCPUInfo(data)
	if cores == 0 && e.NumCPU != nil {
		cores = e.NumCPU()
	}
	if model == "" && cores == 0 {
		return nil
	}
	return &wire.CPU{Model: model, Cores: wire.Int(cores)}
}

func parseCPUInfo(data []byte) (model string, cores int) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	var fallback string
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			cores++
		case "model name":
			if model == "" {
				model = v
			}
		case "Hardware", "cpu model", "Model":
			// ARM and MIPS kernels name the chip differently.
			if fallback == "" {
				fallback = v
			}
		}
	}
	if model == "" {
		model = fallback
	}
	return model, cores
}

// gpu lists nvidia-smi's GPUs with the CUDA version of its header; nil
// without a GPU or without nvidia-smi.
func (e Env) gpu(ctx context.Context) []wire.GPU {
	rows := e.output(ctx, "nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader")
	if rows == "" {
		return nil
	}
	cuda := parseCUDA(e.output(ctx, "nvidia-smi"))
	var gpus []wire.GPU
	for _, row := range strings.Split(rows, "\n") {
		name, driver, ok := strings.Cut(row, ",")
		if !ok {
			continue
		}
		gpus = append(gpus, wire.GPU{Name: strings.TrimSpace(name), Driver: strings.TrimSpace(driver), CUDA: ptr(cuda)})
	}
	return gpus
}

func parseCUDA(header string) string {
	_, rest, ok := strings.Cut(header, "CUDA Version:")
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return ""
	}
	return strings.Trim(f[0], "|")
}

// slurm fires when sinfo is on PATH and slurm.conf exists ($SLURM_CONF, else
// /etc/slurm/slurm.conf).
func (e Env) slurm(context.Context) detection {
	if !e.onPath("sinfo") {
		return detection{}
	}
	conf := "/etc/slurm/slurm.conf"
	if e.Getenv != nil {
		if c := e.Getenv("SLURM_CONF"); c != "" {
			conf = c
		}
	}
	data, err := e.readFile(conf)
	if err != nil {
		return detection{}
	}
	return detection{tags: []string{"host=slurm", "slurm:cluster=" + parseClusterName(data)}, runner: wire.RunnerSlurm}
}

func parseClusterName(conf []byte) string {
	for _, line := range strings.Split(string(conf), "\n") {
		line, _, _ = strings.Cut(line, "#")
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "ClusterName") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// kube fires when kubectl is on PATH and reaches a server.
func (e Env) kube(ctx context.Context) detection {
	if !e.onPath("kubectl") || e.Run == nil {
		return detection{}
	}
	if _, err := e.Run(ctx, "kubectl", "version", "--client=false", "--request-timeout=2s", "--output=json"); err != nil {
		return detection{}
	}
	kctx := e.output(ctx, "kubectl", "config", "current-context")
	return detection{tags: []string{"host=kube", "kube:context=" + kctx}, runner: wire.RunnerKube}
}

// aws reads the IMDSv1 instance identity document.
func (e Env) aws(ctx context.Context) detection {
	if e.HTTPGet == nil || e.AWSBase == "" {
		return detection{}
	}
	body, err := e.HTTPGet(ctx, strings.TrimRight(e.AWSBase, "/")+"/latest/dynamic/instance-identity/document", nil)
	if err != nil {
		return detection{}
	}
	var doc struct {
		InstanceType string `json:"instanceType"`
		Region       string `json:"region"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.InstanceType == "" {
		return detection{}
	}
	return detection{tags: []string{"host=aws", "aws:instance-type=" + doc.InstanceType, "region=" + doc.Region}}
}

// gcp reads the machine type ("projects/1/machineTypes/n2-standard-4").
func (e Env) gcp(ctx context.Context) detection {
	if e.HTTPGet == nil || e.GCPBase == "" {
		return detection{}
	}
	body, err := e.HTTPGet(ctx, strings.TrimRight(e.GCPBase, "/")+"/computeMetadata/v1/instance/machine-type",
		map[string]string{"Metadata-Flavor": "Google"})
	if err != nil {
		return detection{}
	}
	mt := path.Base(strings.TrimSpace(string(body)))
	if mt == "" || mt == "." || mt == "/" {
		return detection{}
	}
	return detection{tags: []string{"host=gcp", "gcp:machine-type=" + mt}}
}

func (e Env) onPath(name string) bool {
	if e.LookPath == nil {
		return false
	}
	_, err := e.LookPath(name)
	return err == nil
}

func (e Env) readFile(p string) ([]byte, error) {
	if e.ReadFile == nil {
		return nil, fmt.Errorf("hostprobe: read %s: no file reader", p)
	}
	return e.ReadFile(p)
}

func httpGet(c *http.Client) func(ctx context.Context, url string, headers map[string]string) ([]byte, error) {
	return func(ctx context.Context, url string, headers map[string]string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, fmt.Errorf("hostprobe: GET %s: %w", url, err)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, fmt.Errorf("hostprobe: GET %s: %w", url, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("hostprobe: GET %s: status %d", url, resp.StatusCode)
		}
		return io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	}
}
