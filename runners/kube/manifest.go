package kube

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Defaults of run_config.kube.
const (
	DefaultImage     = "python:3.12-slim"
	DefaultNamespace = "default"
	ContainerWorkdir = "/workspace"
	GPUResource      = "nvidia.com/gpu"
	volumeName       = "workspace"
)

// The manifest is rendered from these types rather than from the
// Kubernetes API module, so that a test decoding it strictly into the API
// types catches a misspelt field.
type pod struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   metadata `json:"metadata"`
	Spec       podSpec  `json:"spec"`
}

type metadata struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels,omitempty"`
}

type podSpec struct {
	RestartPolicy string      `json:"restartPolicy"`
	Containers    []container `json:"containers"`
	Volumes       []volume    `json:"volumes"`
}

type container struct {
	Name         string         `json:"name"`
	Image        string         `json:"image"`
	Command      []string       `json:"command"`
	WorkingDir   string         `json:"workingDir"`
	Env          []envVar       `json:"env"`
	VolumeMounts []volumeMount  `json:"volumeMounts"`
	Resources    *resourceSpecs `json:"resources,omitempty"`
}

type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	SubPath   string `json:"subPath,omitempty"`
}

type resourceSpecs struct {
	Requests map[string]string `json:"requests,omitempty"`
	Limits   map[string]string `json:"limits,omitempty"`
}

type volume struct {
	Name                  string    `json:"name"`
	HostPath              *hostPath `json:"hostPath,omitempty"`
	PersistentVolumeClaim *claimRef `json:"persistentVolumeClaim,omitempty"`
}

type hostPath struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

type claimRef struct {
	ClaimName string `json:"claimName"`
}

// quantity is the shape of a Kubernetes resource quantity we accept.
var quantity = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$`)

// dnsLabel is a Kubernetes namespace or PVC name.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// podOf is the Pod's name of a run: PodName of its workdir's name, which
// is its invocation id when that is a plain file name (idpath), so that
// the next start's sweep, which has only the workdir, names the same Pod.
func podOf(inv runners.Invocation) string { return PodName(filepath.Base(inv.Workdir)) }

// PodName is the Pod's name for an invocation: "nymph-", the id made
// DNS-safe and cut short, and a hash of the exact id so two ids that
// sanitize alike never share a Pod.
func PodName(invocationID string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(invocationID) {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	sum := sha256.Sum256([]byte(invocationID))
	if s == "" {
		return "nymph-" + hex.EncodeToString(sum[:4])
	}
	return "nymph-" + s + "-" + hex.EncodeToString(sum[:4])
}

// Namespace is run_config.kube.namespace or "default".
func Namespace(cfg *wire.KubeConfig) string {
	if cfg != nil && cfg.Namespace != "" {
		return cfg.Namespace
	}
	return DefaultNamespace
}

// Manifest renders the Pod (JSON, which kubectl apply reads as YAML). The
// workdir is mounted at /workspace from a hostPath (daemon and node share
// a filesystem: single-node clusters, a DaemonSet) or, with
// run_config.kube.pvc, from that ReadWriteMany claim with the invocation
// directory as the sub-path — the claim must be what the daemon mounts as
// its [runtime] workdir. The container's command is entry, or `bash -c
// <script>` for a run with a script (the image must have bash).
func Manifest(inv runners.Invocation, entry []string) ([]byte, error) {
	cfg := inv.Run.RunConfig.Kube
	if cfg == nil {
		cfg = &wire.KubeConfig{}
	}
	ns := Namespace(cfg)
	if !dnsLabel.MatchString(ns) {
		return nil, fmt.Errorf("kube runner: namespace %q is not a valid name", ns)
	}
	image := cmp.Or(cfg.Image, inv.Run.RunConfig.Image, DefaultImage)
	res, err := resources(cfg)
	if err != nil {
		return nil, err
	}
	if inv.Run.Script != nil {
		entry = runners.ScriptArgv(*inv.Run.Script)
	}
	c := container{
		Name: "entry", Image: image, Command: entry, WorkingDir: ContainerWorkdir,
		VolumeMounts: []volumeMount{{Name: volumeName, MountPath: ContainerWorkdir}},
		Resources:    res,
	}
	for _, kv := range runners.ChildEnv(inv.Run, ContainerWorkdir) {
		k, v, _ := strings.Cut(kv, "=")
		c.Env = append(c.Env, envVar{Name: k, Value: v})
	}
	vol := volume{Name: volumeName}
	if cfg.PVC != "" {
		if !dnsLabel.MatchString(cfg.PVC) {
			return nil, fmt.Errorf("kube runner: pvc %q is not a valid claim name", cfg.PVC)
		}
		vol.PersistentVolumeClaim = &claimRef{ClaimName: cfg.PVC}
		c.VolumeMounts[0].SubPath = filepath.Base(inv.Workdir)
	} else {
		vol.HostPath = &hostPath{Path: inv.Workdir, Type: "Directory"}
	}
	p := pod{
		APIVersion: "v1", Kind: "Pod",
		Metadata: metadata{Name: podOf(inv), Namespace: ns, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "nymph",
		}},
		Spec: podSpec{RestartPolicy: "Never", Containers: []container{c}, Volumes: []volume{vol}},
	}
	return json.MarshalIndent(p, "", "  ")
}

// resources maps cpu and memory to requests and limits, gpu to a limit of
// nvidia.com/gpu; each must be a plain quantity.
func resources(cfg *wire.KubeConfig) (*resourceSpecs, error) {
	r := &resourceSpecs{Requests: map[string]string{}, Limits: map[string]string{}}
	for _, q := range []struct {
		name, value string
		request     bool
	}{
		{"cpu", string(cfg.CPU), true},
		{"memory", string(cfg.Memory), true},
		{GPUResource, string(cfg.GPU), false},
	} {
		if q.value == "" {
			continue
		}
		if !quantity.MatchString(q.value) {
			return nil, fmt.Errorf("kube runner: %s %q is not a resource quantity", q.name, q.value)
		}
		r.Limits[q.name] = q.value
		if q.request {
			r.Requests[q.name] = q.value
		}
	}
	if len(r.Limits) == 0 {
		return nil, nil
	}
	return r, nil
}
