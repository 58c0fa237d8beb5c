package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// PodRefFile names the Pod of a run while the daemon follows it.
const PodRefFile = "pod.ref"

// podRef is PodRefFile: what kubectl needs to find the Pod again.
type podRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Context   string `json:"context,omitempty"`
}

// k8sName is a DNS-1123 label or subdomain, which Pod names, namespaces
// and (here) contexts are held to: nothing else reaches kubectl's argv.
var k8sName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

func writePodRef(path string, cfg *wire.KubeConfig, name string) error {
	ref := podRef{Name: name, Namespace: Namespace(cfg)}
	if cfg != nil {
		ref.Context = cfg.Context
	}
	b, err := json.Marshal(ref)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func readPodRef(b []byte) (podRef, error) {
	var ref podRef
	if err := json.Unmarshal(b, &ref); err != nil {
		return ref, err
	}
	if !k8sName.MatchString(ref.Name) || !k8sName.MatchString(ref.Namespace) || (ref.Context != "" && !k8sName.MatchString(ref.Context)) {
		return ref, fmt.Errorf("names %q in %q (context %q): not kubernetes names", ref.Name, ref.Namespace, ref.Context)
	}
	return ref, nil
}

// Reap implements runners.Reaper: every root/*/pod.ref still present
// names the Pod of a run whose daemon was killed outright while following
// it. Nothing collects that Pod's result any more, so it is deleted (one
// deleted already costs nothing) and the file removed.
func (r *Runner) Reap(ctx context.Context, root string, log *slog.Logger) {
	runners.ReapLeftovers(ctx, root, PodRefFile, log, r.deletePod)
}

func (r *Runner) deletePod(ctx context.Context, content string) (string, string, error) {
	ref, err := readPodRef([]byte(content))
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", runners.ErrNotALeftover, err)
	}
	cfg := &wire.KubeConfig{Namespace: ref.Namespace, Context: ref.Context}
	switch _, err := r.kubectl(ctx, nil, DeleteArgv(cfg, ref.Name)...); {
	case errors.Is(err, errNotFound):
		return "", "", runners.ErrLeftoverGone
	case err != nil:
		return "", "", err
	}
	return "pod of an earlier daemon's run still there; deleted", ref.Namespace + "/" + ref.Name, nil
}
