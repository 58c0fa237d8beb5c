// Package builtin builds the runners a daemon offers from the kind names of
// its configuration ([runtime] runners plus detected ones).
//
// It decides which constructor serves which kind name. It does not decide
// which kinds a host offers (configuration and host detection do) nor how
// a run is dispatched (runners.Registry does).
package builtin

import (
	"fmt"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/docker"
	"github.com/nymphd/nymph/runners/kube"
	"github.com/nymphd/nymph/runners/process"
	"github.com/nymphd/nymph/runners/slurm"
)

// Options carries each kind's options; the zero value gives every kind
// its defaults.
type Options struct {
	Process process.Options
	Docker  docker.Options // also used by gvisor
	Slurm   slurm.Options
	Kube    kube.Options
}

// Runners returns one runner per distinct kind in kinds, in order; an
// alias ("subprocess") counts as its kind. A name this build does not know
// is an error, so a typo in the configuration is seen at boot rather than
// as RunnerUnavailable on every run.
func Runners(kinds []string, opt Options) ([]runners.Runner, error) {
	var out []runners.Runner
	seen := map[string]bool{}
	for _, k := range kinds {
		canon, ok := runners.Canonical(k)
		if !ok {
			return nil, fmt.Errorf("builtin: unknown runner kind %q", k)
		}
		if seen[canon] {
			continue
		}
		seen[canon] = true
		rn, err := build(canon, opt)
		if err != nil {
			return nil, err
		}
		out = append(out, rn)
	}
	return out, nil
}

func build(kind string, opt Options) (runners.Runner, error) {
	switch kind {
	case runners.KindProcess:
		return process.New(opt.Process), nil
	case runners.KindDocker:
		return docker.New(opt.Docker), nil
	case runners.KindGVisor:
		return docker.NewGVisor(opt.Docker), nil
	case runners.KindSlurm:
		return slurm.New(opt.Slurm), nil
	case runners.KindKube:
		return kube.New(opt.Kube), nil
	}
	for _, rn := range runners.BuildTagged() {
		if rn.Kind() == kind {
			return rn, nil
		}
	}
	return nil, fmt.Errorf("builtin: no runner for kind %q in this build", kind)
}
