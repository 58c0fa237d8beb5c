package wire

// The runner kinds of protocol "1": what RunConfig.Runner names and
// Capabilities.Runners lists (docs/protocol.md, "`run`"). This is their
// only home: the daemon core resolves a run's kind with RunnerKind, the
// runner registry and the config name them from here.
const (
	RunnerProcess = "process"
	// RunnerSubprocess is an alias of RunnerProcess: a run naming it runs
	// under the process runner.
	RunnerSubprocess = "subprocess"
	RunnerDocker     = "docker"
	RunnerGVisor     = "gvisor"
	RunnerSlurm      = "slurm"
	RunnerKube       = "kube"
	// RunnerMock is offered only by builds that include the mock runner.
	RunnerMock = "mock"
)

// RunnerKind resolves a runner name to the kind it stands for: an alias to
// its kind, a kind to itself. ok is false for a name that is neither.
// Names are compared exactly: "Docker" is no kind.
func RunnerKind(name string) (kind string, ok bool) {
	switch name {
	case RunnerSubprocess:
		return RunnerProcess, true
	case RunnerProcess, RunnerDocker, RunnerGVisor, RunnerSlurm, RunnerKube, RunnerMock:
		return name, true
	}
	return "", false
}
