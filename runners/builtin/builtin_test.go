package builtin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/runners"
)

func kindsOf(rs []runners.Runner) []string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, r.Kind())
	}
	return ks
}

func TestRunners(t *testing.T) {
	rs, err := Runners([]string{"process", "subprocess", "docker", "gvisor", "slurm", "kube", "docker"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"process", "docker", "gvisor", "slurm", "kube"}, kindsOf(rs)); diff != "" {
		t.Fatal(diff)
	}
	if _, err := Runners([]string{"process", "dokcer"}, Options{}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if rs, err := Runners(nil, Options{}); err != nil || len(rs) != 0 {
		t.Fatalf("%v %v", rs, err)
	}
}
