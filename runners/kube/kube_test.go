package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/hostio/idpath"
	"github.com/nymphd/nymph/internal/testkit"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
	corev1 "k8s.io/api/core/v1"
	sigyaml "sigs.k8s.io/yaml"
)

func ptr[T any](v T) *T { return &v }

// decodePod decodes a manifest strictly into the Kubernetes API type: an
// unknown or misspelt field is an error.
func decodePod(t *testing.T, manifest []byte) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(manifest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("manifest does not decode strictly as a Pod: %v\n%s", err, manifest)
	}
	// kubectl reads it as YAML too.
	var viaYAML corev1.Pod
	if err := sigyaml.UnmarshalStrict(manifest, &viaYAML); err != nil {
		t.Fatalf("manifest is not strict YAML for a Pod: %v", err)
	}
	return p
}

func invocation(cfg *wire.KubeConfig) runners.Invocation {
	return runners.Invocation{
		Run: wire.Run{InvocationID: "Inv_01HZ.abc", ParentInvocationID: ptr("par"),
			RunConfig: wire.RunConfig{Runner: "kube", Kube: cfg}},
		Workdir: "/var/lib/dreamlake/udf/Inv_01HZ.abc",
	}
}

func TestManifestHostPath(t *testing.T) {
	m, err := Manifest(invocation(nil), DefaultEntry)
	if err != nil {
		t.Fatal(err)
	}
	p := decodePod(t, m)
	if p.APIVersion != "v1" || p.Kind != "Pod" || p.Namespace != "default" || p.Name != PodName("Inv_01HZ.abc") {
		t.Fatalf("meta %+v %+v", p.TypeMeta, p.ObjectMeta)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever || len(p.Spec.Containers) != 1 {
		t.Fatalf("spec %+v", p.Spec)
	}
	c := p.Spec.Containers[0]
	if c.Image != DefaultImage || c.WorkingDir != "/workspace" || !cmp.Equal(c.Command, DefaultEntry) {
		t.Fatalf("container %+v", c)
	}
	wantEnv := []corev1.EnvVar{
		{Name: "DREAMLAKE_INVOCATION_ID", Value: "Inv_01HZ.abc"},
		{Name: "DREAMLAKE_WORKDIR", Value: "/workspace"},
		{Name: "DREAMLAKE_PARENT_INVOCATION_ID", Value: "par"},
	}
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff([]corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}}, c.VolumeMounts); diff != "" {
		t.Fatal(diff)
	}
	v := p.Spec.Volumes[0]
	if v.HostPath == nil || v.HostPath.Path != "/var/lib/dreamlake/udf/Inv_01HZ.abc" || *v.HostPath.Type != corev1.HostPathDirectory || v.PersistentVolumeClaim != nil {
		t.Fatalf("volume %+v", v)
	}
	if len(c.Resources.Limits) != 0 {
		t.Fatalf("resources %+v", c.Resources)
	}
}

func TestManifestPVCAndResources(t *testing.T) {
	inv := invocation(&wire.KubeConfig{Namespace: "ml", PVC: "udf-shared", CPU: "2", Memory: "4Gi", GPU: "1"})
	inv.Run.RunConfig.Image = "registry.local/fn:3"
	m, err := Manifest(inv, []string{"python", "-m", "x"})
	if err != nil {
		t.Fatal(err)
	}
	p := decodePod(t, m)
	if p.Namespace != "ml" {
		t.Fatalf("namespace %q", p.Namespace)
	}
	c := p.Spec.Containers[0]
	if c.Image != "registry.local/fn:3" {
		t.Fatalf("image %q", c.Image)
	}
	if diff := cmp.Diff([]corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace", SubPath: "Inv_01HZ.abc"}}, c.VolumeMounts); diff != "" {
		t.Fatal(diff)
	}
	v := p.Spec.Volumes[0]
	if v.HostPath != nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "udf-shared" {
		t.Fatalf("volume %+v", v)
	}
	lim, req := c.Resources.Limits, c.Resources.Requests
	if lim.Cpu().String() != "2" || lim.Memory().String() != "4Gi" || lim.Name(GPUResource, "").String() != "1" {
		t.Fatalf("limits %v", lim)
	}
	if req.Cpu().String() != "2" || req.Memory().String() != "4Gi" || len(req) != 2 {
		t.Fatalf("requests %v", req)
	}
}

// run_config.kube.image (spec 003 lists image among the kube runner's
// keys) names the Pod's image; run_config.image is the fallback, then
// DefaultImage.
func TestManifestImage(t *testing.T) {
	for _, tc := range []struct{ kube, top, want string }{
		{"registry.example/train:7", "", "registry.example/train:7"},
		{"registry.example/train:7", "registry.local/fn:3", "registry.example/train:7"},
		{"", "registry.local/fn:3", "registry.local/fn:3"},
		{"", "", DefaultImage},
	} {
		var raw []byte
		raw = msgp.AppendMapHeader(raw, 2)
		raw = msgp.AppendString(msgp.AppendString(raw, "runner"), "kube")
		raw = msgp.AppendMapHeader(msgp.AppendString(raw, "kube"), 1)
		raw = msgp.AppendString(msgp.AppendString(raw, "image"), tc.kube)
		var rc wire.RunConfig
		if _, err := rc.UnmarshalMsg(raw); err != nil {
			t.Fatal(err)
		}
		inv := invocation(rc.Kube)
		inv.Run.RunConfig.Image = tc.top
		m, err := Manifest(inv, DefaultEntry)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodePod(t, m).Spec.Containers[0].Image; got != tc.want {
			t.Errorf("kube.image %q, image %q: pod image %q, want %q", tc.kube, tc.top, got, tc.want)
		}
	}
}

// TestStrictDecodeCatchesTypos proves the check has teeth: the same
// manifest with one field misspelt is refused.
func TestStrictDecodeCatchesTypos(t *testing.T) {
	m, err := Manifest(invocation(nil), DefaultEntry)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(m, []byte(`"workingDir"`), []byte(`"workDir"`), 1)
	var p corev1.Pod
	dec := json.NewDecoder(bytes.NewReader(bad))
	dec.DisallowUnknownFields()
	if dec.Decode(&p) == nil {
		t.Fatal("a misspelt field decoded")
	}
}

func TestManifestRefusesBadValues(t *testing.T) {
	for _, cfg := range []*wire.KubeConfig{
		{CPU: "two"},
		{Memory: "4 Gi"},
		{GPU: "1; rm"},
		{Namespace: "Bad_NS"},
		{PVC: "../x"},
	} {
		if _, err := Manifest(invocation(cfg), DefaultEntry); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestPodName(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"inv1", "INV1", "a_b", "a.b", strings.Repeat("x", 200), "___"} {
		n := PodName(id)
		if len(n) > 63 || !dnsLabel.MatchString(n) || strings.Contains(n, ".") {
			t.Errorf("%q → %q is not a DNS label", id, n)
		}
		if prev, ok := seen[n]; ok {
			t.Errorf("%q and %q share pod name %q", prev, id, n)
		}
		seen[n] = id
	}
}

func TestArgv(t *testing.T) {
	cfg := &wire.KubeConfig{Context: "kind-x", Namespace: "ml"}
	if diff := cmp.Diff([]string{"--context", "kind-x", "--namespace", "ml", "apply", "-f", "-"}, ApplyArgv(cfg)); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"--namespace", "default", "get", "pod", "p", "-o", "jsonpath={.status.phase}"}, PhaseArgv(nil, "p")); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"--namespace", "default", "logs", "p", "--tail=4096"}, LogsArgv(nil, "p")); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"--namespace", "default", "delete", "pod", "p"}, DeleteArgv(nil, "p")); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"--namespace", "default", "get", "pod", "p", "-o", "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}"}, ExitCodeArgv(nil, "p")); diff != "" {
		t.Error(diff)
	}
}

// fakeKubectl records calls and answers `get pod` with the phase file.
func fakeKubectl(t *testing.T) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	script := fmt.Sprintf(`#!/bin/bash
d=%s
n=$(ls "$d" | grep -c argv)
printf '%%s\n' "$@" > "$d/$n.argv"
case " $* " in
*"terminated.exitCode"*) cat "$d/exitcode" 2>/dev/null ;;
*" apply "*) cat > "$d/applied.json" ;;
*" logs "*) cat "$d/log" 2>/dev/null ;;
*" get pod "*) if [ -f "$d/phase" ]; then cat "$d/phase"; else echo 'Error from server (NotFound): pods "x" not found' >&2; exit 1; fi ;;
*" delete pod "*) if [ -f "$d/delete-fails" ]; then echo 'Unable to connect to the server' >&2; exit 1; fi ;;
esac
`, dir)
	bin = filepath.Join(dir, "kubectl")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

func TestRunWithFakeKubectl(t *testing.T) {
	bin, calls := fakeKubectl(t)
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Pending"), 0o600)
	root := t.TempDir()
	reg := runners.NewRegistry(runners.Config{Root: root}, New(Options{Kubectl: bin}))
	run := wire.Run{InvocationID: "k1", RunConfig: wire.RunConfig{Kube: &wire.KubeConfig{PollIntervalS: ptr(wire.Number(0.05))}}}
	done := make(chan runners.Outcome, 1)
	go func() { done <- reg.ExecuteAs(context.Background(), runners.KindKube, run, "") }()
	testkit.WaitFile(t, 10*time.Second, filepath.Join(calls, "applied.json"))
	// The "Pod" writes its result, then reaches Succeeded.
	os.WriteFile(filepath.Join(root, "k1", "result.msgpack"), []byte("pod result"), 0o600)
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Succeeded"), 0o600)
	if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded, ResultBlob: []byte("pod result")}, <-done); diff != "" {
		t.Fatal(diff)
	}
	applied, _ := os.ReadFile(filepath.Join(calls, "applied.json"))
	if p := decodePod(t, applied); p.Spec.Volumes[0].HostPath.Path != filepath.Join(root, "k1") {
		t.Fatalf("applied %s", applied)
	}
	b, _ := os.ReadFile(filepath.Join(calls, "0.argv"))
	if string(b) != "--namespace\ndefault\napply\n-f\n-\n" {
		t.Fatalf("first call %q", b)
	}
	entries, _ := os.ReadDir(calls)
	last := 0
	for _, e := range entries {
		var n int
		if _, err := fmt.Sscanf(e.Name(), "%d.argv", &n); err == nil && n > last {
			last = n
		}
	}
	b, _ = os.ReadFile(filepath.Join(calls, fmt.Sprintf("%d.argv", last)))
	if string(b) != "--namespace\ndefault\ndelete\npod\n"+PodName("k1")+"\n" {
		t.Fatalf("last call %q", b)
	}
}

// While the Pod runs, each look at its phase also reads the end of its
// log into the run's Tail.
func TestPodLogReachesTheTail(t *testing.T) {
	bin, calls := fakeKubectl(t)
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Running"), 0o600)
	os.WriteFile(filepath.Join(calls, "log"), []byte("epoch 1\n"), 0o600)
	root := t.TempDir()
	reg := runners.NewRegistry(runners.Config{Root: root}, New(Options{Kubectl: bin}))
	run := wire.Run{InvocationID: "k3", Script: ptr("train"),
		RunConfig: wire.RunConfig{Kube: &wire.KubeConfig{PollIntervalS: ptr(wire.Number(0.05))}}}
	tail := runners.NewTail()
	done := make(chan runners.Outcome, 1)
	go func() {
		done <- reg.Execute(context.Background(), runners.Execution{Kind: runners.KindKube, Run: run, Tail: tail})
	}()
	testkit.WaitUntil(t, 10*time.Second, "the pod's log in the tail", func() bool { return tail.String() == "epoch 1\n" })
	os.WriteFile(filepath.Join(calls, "log"), []byte("epoch 1\nepoch 2\n"), 0o600)
	testkit.WaitUntil(t, 10*time.Second, "the pod's log refreshed", func() bool { return tail.String() == "epoch 1\nepoch 2\n" })
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Succeeded"), 0o600)
	if o := <-done; o.State != wire.StateSucceeded {
		t.Fatalf("%+v", o)
	}
	entries, _ := os.ReadDir(calls)
	for _, e := range entries {
		if b, _ := os.ReadFile(filepath.Join(calls, e.Name())); strings.Contains(string(b), "\nlogs\n") {
			if want := strings.Join(LogsArgv(nil, PodName("k3")), "\n") + "\n"; string(b) != want {
				t.Fatalf("logs call %q, want %q", b, want)
			}
			return
		}
	}
	t.Fatal("no kubectl logs call")
}

func TestFailedPhaseAndCancel(t *testing.T) {
	bin, calls := fakeKubectl(t)
	root := t.TempDir()
	reg := runners.NewRegistry(runners.Config{Root: root}, New(Options{Kubectl: bin}))
	run := wire.Run{InvocationID: "k2", RunConfig: wire.RunConfig{Kube: &wire.KubeConfig{PollIntervalS: ptr(wire.Number(0.05))}}}

	os.WriteFile(filepath.Join(calls, "phase"), []byte("Failed"), 0o600)
	o := reg.ExecuteAs(context.Background(), runners.KindKube, run, "")
	if o.State != wire.StateFailed || o.Error.Message != "entry program failed: pod "+PodName("k2")+" phase Failed" {
		t.Fatalf("%+v", o.Error)
	}

	os.WriteFile(filepath.Join(calls, "phase"), []byte("Running"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() { done <- reg.ExecuteAs(ctx, runners.KindKube, run, "") }()
	// The cancel may land before, during or after the apply; all yield killed.
	cancel()
	if diff := cmp.Diff(runners.Killed(), <-done); diff != "" {
		t.Fatal(diff)
	}
}

// A Pod kubectl could not delete when its run was cancelled keeps its
// record, so the next start deletes it rather than forget it.
func TestCancelWhoseDeleteFailsKeepsThePodRecord(t *testing.T) {
	bin, calls := fakeKubectl(t)
	root := t.TempDir()
	reg := runners.NewRegistry(runners.Config{Root: root}, New(Options{Kubectl: bin}))
	run := wire.Run{InvocationID: "k3", RunConfig: wire.RunConfig{Kube: &wire.KubeConfig{PollIntervalS: ptr(wire.Number(0.05))}}}
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Running"), 0o600)
	os.WriteFile(filepath.Join(calls, "delete-fails"), nil, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() { done <- reg.ExecuteAs(ctx, runners.KindKube, run, "") }()
	testkit.WaitFile(t, 10*time.Second, filepath.Join(calls, "applied.json"))
	cancel()
	<-done
	if b, err := os.ReadFile(filepath.Join(root, "k3", PodRefFile)); err != nil || !strings.Contains(string(b), PodName("k3")) {
		t.Errorf("%s after a failed delete: %q %v, want the Pod's record kept", PodRefFile, b, err)
	}
}

func TestScriptRun(t *testing.T) {
	inv := invocation(nil)
	inv.Run.Script = ptr("echo hi > out.txt")
	m, err := Manifest(inv, []string{"python", "-m", "entry"})
	if err != nil {
		t.Fatal(err)
	}
	p := decodePod(t, m)
	if diff := cmp.Diff([]string{"bash", "-c", "echo hi > out.txt"}, p.Spec.Containers[0].Command); diff != "" {
		t.Fatal(diff)
	}
	if p.Spec.Containers[0].WorkingDir != ContainerWorkdir {
		t.Fatalf("workingDir %q", p.Spec.Containers[0].WorkingDir)
	}

	bin, calls := fakeKubectl(t)
	root := t.TempDir()
	reg := runners.NewRegistry(runners.Config{Root: root}, New(Options{Kubectl: bin}))
	run := wire.Run{InvocationID: "k3", Script: ptr("exit 5"), RunConfig: wire.RunConfig{Kube: &wire.KubeConfig{PollIntervalS: ptr(wire.Number(0.05))}}}
	// Succeeded: by the phase alone, an empty result.
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Succeeded"), 0o600)
	if diff := cmp.Diff(runners.Outcome{State: wire.StateSucceeded}, reg.ExecuteAs(context.Background(), runners.KindKube, run, "")); diff != "" {
		t.Fatal(diff)
	}
	// Failed: the container's exit code, when kubectl tells it.
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Failed"), 0o600)
	os.WriteFile(filepath.Join(calls, "exitcode"), []byte("5"), 0o600)
	o := reg.ExecuteAs(context.Background(), runners.KindKube, run, "")
	if o.State != wire.StateFailed || o.Error.TypeName != wire.ErrTypeScriptFailed || o.Error.Message != "exit status 5" || o.ExitCode == nil || *o.ExitCode != 5 {
		t.Fatalf("%+v %+v", o, o.Error)
	}
	os.Remove(filepath.Join(calls, "exitcode"))
	o = reg.ExecuteAs(context.Background(), runners.KindKube, run, "")
	if o.State != wire.StateFailed || o.Error.Message != "pod "+PodName("k3")+" phase Failed" || o.ExitCode != nil {
		t.Fatalf("%+v %+v", o, o.Error)
	}
}

// A run names its Pod in its workdir while it follows it and removes the
// name when it returns; Reap deletes the Pod a leftover pod.ref names
// (its daemon was killed outright), in the namespace and context the run
// used, and hands kubectl nothing that is not a kubernetes name.
func TestReapDeletesLeftoverPods(t *testing.T) {
	bin, calls := fakeKubectl(t)
	os.WriteFile(filepath.Join(calls, "phase"), []byte("Running"), 0o600)
	root := t.TempDir()
	reg := runners.NewRegistry(runners.Config{Root: root}, New(Options{Kubectl: bin}))
	kc := &wire.KubeConfig{Namespace: "ml", Context: "prod", PollIntervalS: ptr(wire.Number(0.05))}
	run := wire.Run{InvocationID: "k9", RunConfig: wire.RunConfig{Kube: kc}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan runners.Outcome, 1)
	go func() { done <- reg.ExecuteAs(ctx, runners.KindKube, run, "") }()
	ref := filepath.Join(root, "k9", PodRefFile)
	testkit.WaitFile(t, 10*time.Second, filepath.Join(calls, "applied.json"))
	b, err := os.ReadFile(ref)
	if err != nil || string(b) != `{"name":"`+PodName("k9")+`","namespace":"ml","context":"prod"}`+"\n" {
		t.Fatalf("%s while the pod runs: %s, %v", PodRefFile, b, err)
	}
	cancel()
	<-done
	if _, err := os.Stat(ref); !os.IsNotExist(err) {
		t.Fatalf("%s kept after the run returned: %v", PodRefFile, err)
	}

	// What a daemon killed outright leaves behind.
	os.WriteFile(ref, b, 0o600)
	odd := filepath.Join(root, "k-odd", PodRefFile)
	os.MkdirAll(filepath.Dir(odd), 0o700)
	os.WriteFile(odd, []byte(`{"name":"--all","namespace":"ml"}`), 0o600)
	before, _ := os.ReadDir(calls)
	runners.NewRegistry(runners.Config{Root: root}, New(Options{Kubectl: bin})).Reap(context.Background())
	after, _ := os.ReadDir(calls)
	if len(after) != len(before)+1 {
		t.Fatalf("Reap made %d kubectl calls, want 1", len(after)-len(before))
	}
	last, _ := os.ReadFile(filepath.Join(calls, fmt.Sprintf("%d.argv", len(before)-countNonArgv(before))))
	if want := strings.Join(DeleteArgv(kc, PodName("k9")), "\n") + "\n"; string(last) != want {
		t.Errorf("Reap called kubectl %q, want %q", last, want)
	}
	if _, err := os.Stat(ref); !os.IsNotExist(err) {
		t.Errorf("%s kept after the pod was deleted: %v", ref, err)
	}
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("a reference that names no pod was removed: %v", err)
	}
}

// countNonArgv counts the fake's files that are not call records.
func countNonArgv(entries []os.DirEntry) int {
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".argv") {
			n++
		}
	}
	return n
}

// A leftover pod.ref is held to what the runner would have written in
// that workdir: the Pod it names is its run's, and its context (a
// kubeconfig's own name, which real clusters spell with '@', '_', ':'
// and '/') is deleted in as long as kubectl can only take it as the
// value of --context.
func TestReapHoldsPodRefToTheRun(t *testing.T) {
	for _, tc := range []struct {
		name, dir, pod, context string
		deleted                 bool
	}{
		{"kubeadm context", "k-adm", PodName("k-adm"), "kubernetes-admin@kubernetes", true},
		{"GKE context", "k-gke", PodName("k-gke"), "gke_my-proj_europe-west1-b_ml", true},
		{"EKS context", "k-eks", PodName("k-eks"), "arn:aws:eks:eu-west-1:123456789012:cluster/ml", true},
		{"no context", "k-none", PodName("k-none"), "", true},
		{"context read as a flag", "k-flag", PodName("k-flag"), "--kubeconfig=/tmp/evil", false},
		{"context with a newline", "k-nl", PodName("k-nl"), "prod\n--all", false},
		{"another run's pod", "k-mine", PodName("k-other"), "prod", false},
		{"a pod no run is named", "k-all", "--all", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, calls := fakeKubectl(t)
			root := t.TempDir()
			ref := filepath.Join(root, tc.dir, PodRefFile)
			os.MkdirAll(filepath.Dir(ref), 0o700)
			b, _ := json.Marshal(podRef{Name: tc.pod, Namespace: "ml", Context: tc.context})
			os.WriteFile(ref, b, 0o600)
			var logged strings.Builder
			runners.NewRegistry(runners.Config{Root: root, Log: slog.New(slog.NewTextHandler(&logged, nil))},
				New(Options{Kubectl: bin})).Reap(context.Background())
			argv, err := os.ReadFile(filepath.Join(calls, "0.argv"))
			_, kept := os.Stat(ref)
			if !tc.deleted {
				if err == nil {
					t.Errorf("kubectl called with %q", argv)
				}
				if kept != nil {
					t.Errorf("%s removed: %v", PodRefFile, kept)
				}
				return
			}
			want := strings.Join(DeleteArgv(&wire.KubeConfig{Namespace: "ml", Context: tc.context}, tc.pod), "\n") + "\n"
			if string(argv) != want {
				t.Errorf("kubectl called with %q (%v), want %q; log:\n%s", argv, err, want, logged.String())
			}
			if !os.IsNotExist(kept) {
				t.Errorf("%s kept after its pod was deleted: %v", PodRefFile, kept)
			}
		})
	}
}

// The Pod of a run whose id is no plain file name (its workdir is named
// by idpath) is the one the next start's sweep names from the workdir
// alone, so a leftover pod.ref of it is taken, not refused.
func TestPodRefOfAnIDThatIsNoFileName(t *testing.T) {
	name, err := idpath.Name("inv:1")
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation(nil)
	inv.Run.InvocationID, inv.Workdir = "inv:1", filepath.Join("/var/lib/dreamlake/udf", name)
	m, err := Manifest(inv, DefaultEntry)
	if err != nil {
		t.Fatal(err)
	}
	pod := decodePod(t, m).Name
	ref, err := readPodRef(inv.Workdir, []byte(encodePodRef(nil, pod)))
	if err != nil || ref.Name != pod {
		t.Fatalf("the sweep refused the run's own pod.ref (%s): %v", pod, err)
	}
}
