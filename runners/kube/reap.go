package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode"

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

func encodePodRef(cfg *wire.KubeConfig, name string) string {
	ref := podRef{Name: name, Namespace: Namespace(cfg)}
	if cfg != nil {
		ref.Context = cfg.Context
	}
	b, _ := json.Marshal(ref) // three strings: cannot fail
	return string(b)
}

// readPodRef reads the pod.ref of the run in workdir and holds it to what
// the runner would have written there, since each field reaches kubectl's
// argv: the Pod's name is PodName of the workdir's run, the namespace a
// DNS label, and the context (kubeconfig's own name for it, which can be
// `user@cluster`, `gke_proj_zone_cluster` or an EKS ARN) a plain argument.
func readPodRef(workdir string, b []byte) (podRef, error) {
	var ref podRef
	if err := json.Unmarshal(b, &ref); err != nil {
		return ref, err
	}
	if want := PodName(filepath.Base(workdir)); ref.Name != want {
		return ref, fmt.Errorf("pod %q is not this run's (%s)", ref.Name, want)
	}
	if !dnsLabel.MatchString(ref.Namespace) {
		return ref, fmt.Errorf("namespace %q of pod %s: not a kubernetes name", ref.Namespace, ref.Name)
	}
	if ref.Context != "" && !plainArgument(ref.Context) {
		return ref, fmt.Errorf("context %q of pod %s: not a plain argument", ref.Context, ref.Name)
	}
	return ref, nil
}

// plainArgument is s as kubectl can only take it as a flag's value: no
// leading '-' that could read as a flag of its own, no control character
// (a newline) that could break a log line or a shell's reading of it.
func plainArgument(s string) bool {
	return !strings.HasPrefix(s, "-") && !strings.ContainsFunc(s, unicode.IsControl)
}

// Leftovers implements runners.Reaper: a pod.ref still present at the
// next start names the Pod of a run whose daemon was killed outright
// while following it. Nothing collects that Pod's result any more, so it
// is deleted (one deleted already costs nothing) and the file removed.
func (r *Runner) Leftovers() runners.Leftovers {
	return runners.Leftovers{File: PodRefFile, Noun: "Pod", Stop: r.deleteLeftover}
}

func (r *Runner) deleteLeftover(ctx context.Context, workdir, content string) error {
	ref, err := readPodRef(workdir, []byte(content))
	if err != nil {
		return fmt.Errorf("%w: %v", runners.ErrNotALeftover, err)
	}
	cfg := &wire.KubeConfig{Namespace: ref.Namespace, Context: ref.Context}
	switch _, err := r.kubectl(ctx, nil, DeleteArgv(cfg, ref.Name)...); {
	case errors.Is(err, errNotFound):
		return runners.ErrLeftoverGone
	case err != nil:
		return err
	}
	return nil
}
