// Package vectors defines the golden wire vectors of protocol "1": for every
// message type, a populated Go value and, written separately from the
// protocol text, the field map its msgpack encoding must decode to.
//
// It decides what the vectors contain and how they are rendered to files
// (Render). It does not encode anything itself beyond calling the wire
// package's codecs, and it performs no I/O: gen/goldens writes the files,
// gen/freshness compares them, and the wire package's tests read them.
//
// The field maps are deliberately not derived from the encoder: a test that
// decodes the golden bytes with an independent msgpack implementation and
// compares the result with these maps is the proof that our bytes are what a
// peer using rmp_serde's to_vec_named expects.
package vectors

import (
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Message is implemented by a pointer to every wire message.
type Message interface {
	msgp.Marshaler
	msgp.Unmarshaler
}

// M is the expected field map of a msgpack map whose keys are struct field
// names: tests may inject unknown keys into it. Integers are written as Go
// int, floats as float64, bin as []byte, str as string.
type M map[string]any

// Verbatim is the expected field map of a map that is data rather than a
// struct (env, headers, config) or that travels as raw bytes (a command
// body): its keys are kept exactly, never augmented by tests.
type Verbatim map[string]any

// Vector is one golden message.
type Vector struct {
	// Name is the file stem under wirecore/wire/testdata.
	Name string
	// Value points at the populated message.
	Value Message
	// New returns a pointer to a zero message of the same type.
	New func() Message
	// Fields is what the encoding of Value must decode to.
	Fields M
	// Nullable lists the dotted key paths (array elements as "[]") that a
	// decoder must accept as msgpack nil.
	Nullable []string
}

func ptr[T any](v T) *T { return &v }

func mustEncode(m msgp.Marshaler) []byte {
	b, err := m.MarshalMsg(nil)
	if err != nil {
		panic("vectors: encode: " + err.Error())
	}
	return b
}

// Every free-form map (env, headers, config) in a vector has at most one
// entry: Go, like rmp_serde with a HashMap, writes map entries in no fixed
// order, and golden bytes must be stable.

// Values shared by several vectors, so that an embedded message and its own
// vector agree.
const (
	machineID   = "gpu-node-07"
	workerID    = "65f1c0ffee0123456789abcd"
	publicKey   = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
	keyID       = "key_01JD3S6Z8Q4K2M7N9P0R1T3V5W"
	sessionULID = "01JD3S6Z8Q4K2M7N9P0R1T3V5W"
	workdir     = "/var/lib/nymph/work"
	sha256Hex   = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	startedAt   = 1764410000.5
)

var argsBlob = []byte{0x92, 0xa3, 'a', 'b', 'c', 0x2a}

func capabilities() wire.Capabilities {
	return wire.Capabilities{Runners: []string{"process", "docker"}, MaxInvocations: 4, Workdir: workdir}
}

func capabilitiesFields() M {
	return M{"runners": []any{"process", "docker"}, "max_invocations": 4, "workdir": workdir}
}

func updatedCapabilities() *wire.Capabilities {
	return &wire.Capabilities{Runners: []string{"process", "docker", "gvisor"}, MaxInvocations: 8, Workdir: workdir}
}

func updatedCapabilitiesFields() M {
	return M{"runners": []any{"process", "docker", "gvisor"}, "max_invocations": 8, "workdir": workdir}
}

func helloRequest() *wire.HelloRequest {
	return &wire.HelloRequest{
		MachineID:    machineID,
		Label:        "lab gpu 7",
		Tags:         []string{"region=eu-west", "gpu=a100"},
		Lanes:        []string{"default", "gpu"},
		Capabilities: capabilities(),
		Versions: wire.Versions{
			Daemon:   ptr("0.1.0"),
			Protocol: ptr(wire.ProtocolVersion),
			Runsc:    nil,
			Docker:   ptr("27.3.1"),
			Python:   ptr("3.11.7"),
			Kernel:   ptr("Linux 6.8.0-45-generic"),
			Distro:   ptr("Ubuntu 24.04.1 LTS"),
			Arch:     ptr("x86_64"),
			CPU:      &wire.CPU{Model: "AMD EPYC 7763 64-Core Processor", Cores: 128},
			GPU:      []wire.GPU{{Name: "NVIDIA A100-SXM4-80GB", Driver: "550.90.07", CUDA: ptr("12.4")}},
		},
		PublicKey: ptr(publicKey),
	}
}

func helloRequestFields() M {
	return M{
		"machine_id":   machineID,
		"label":        "lab gpu 7",
		"tags":         []any{"region=eu-west", "gpu=a100"},
		"lanes":        []any{"default", "gpu"},
		"capabilities": capabilitiesFields(),
		"versions": M{
			"daemon":   "0.1.0",
			"protocol": "1",
			"runsc":    nil,
			"docker":   "27.3.1",
			"python":   "3.11.7",
			"kernel":   "Linux 6.8.0-45-generic",
			"distro":   "Ubuntu 24.04.1 LTS",
			"arch":     "x86_64",
			"cpu":      M{"model": "AMD EPYC 7763 64-Core Processor", "cores": 128},
			"gpu":      []any{M{"name": "NVIDIA A100-SXM4-80GB", "driver": "550.90.07", "cuda": "12.4"}},
		},
		"public_key": publicKey,
	}
}

var helloRequestNullable = []string{
	"public_key", "versions.daemon", "versions.protocol", "versions.runsc",
	"versions.docker", "versions.python", "versions.kernel", "versions.distro",
	"versions.arch", "versions.cpu", "versions.gpu", "versions.gpu.[].cuda",
}

// A daemon without identity, GPU or probes: lanes and public_key absent,
// unresolved versions null.
func helloRequestMinimal() *wire.HelloRequest {
	return &wire.HelloRequest{
		MachineID:    "laptop",
		Label:        "",
		Tags:         []string{},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 0, Workdir: workdir},
		Versions:     wire.Versions{Daemon: ptr("0.1.0"), Protocol: ptr(wire.ProtocolVersion)},
	}
}

func helloRequestMinimalFields() M {
	return M{
		"machine_id":   "laptop",
		"label":        "",
		"tags":         []any{},
		"capabilities": M{"runners": []any{"process"}, "max_invocations": 0, "workdir": workdir},
		"versions": M{
			"daemon": "0.1.0", "protocol": "1", "runsc": nil, "docker": nil, "python": nil,
			"kernel": nil, "distro": nil, "arch": nil, "cpu": nil, "gpu": nil,
		},
	}
}

func helloResponse() *wire.HelloResponse {
	return &wire.HelloResponse{
		WorkerID:           ptr(workerID),
		SessionToken:       ptr(sessionULID),
		SessionTTLS:        86400,
		Config:             map[string]msgp.Raw{"log_level": msgp.AppendString(nil, "info")},
		Cursor:             nil,
		Reject:             nil,
		KeyID:              ptr(keyID),
		KeyRotationMaxAgeS: 2592000,
		ServerTimeEpochS:   ptr(wire.Number(1764410000)),
	}
}

func helloResponseFields() M {
	return M{
		"worker_id":              workerID,
		"session_token":          sessionULID,
		"session_ttl_s":          86400,
		"config":                 Verbatim{"log_level": "info"},
		"cursor":                 nil,
		"reject":                 nil,
		"key_id":                 keyID,
		"key_rotation_max_age_s": 2592000,
		"server_time_epoch_s":    1764410000,
	}
}

var helloResponseNullable = []string{
	"worker_id", "session_token", "cursor", "reject", "key_id", "server_time_epoch_s",
}

func helloResponseReject() *wire.HelloResponse {
	return &wire.HelloResponse{
		Config: map[string]msgp.Raw{},
		Reject: &wire.Reject{Code: wire.RejectEnrollTokenRequired, Message: "this control plane requires an enrollment token"},
	}
}

func helloResponseRejectFields() M {
	return M{
		"worker_id":              nil,
		"session_token":          nil,
		"session_ttl_s":          0,
		"config":                 Verbatim{},
		"cursor":                 nil,
		"reject":                 M{"code": "enroll_token_required", "message": "this control plane requires an enrollment token"},
		"key_id":                 nil,
		"key_rotation_max_age_s": 0,
		"server_time_epoch_s":    nil,
	}
}

func validationError() *wire.ValidationError {
	return &wire.ValidationError{Error: "missing field", Field: "capabilities.runners"}
}

func pollRequest() *wire.PollRequest {
	return &wire.PollRequest{
		WorkerID: workerID,
		Queue:    "gpu*",
		TimeoutS: 20,
		Cursor:   nil,
		Invocations: []wire.InvocationStatus{
			{InvocationID: "inv-01", State: wire.StateRunning, StartedAt: startedAt},
			{InvocationID: "inv-02", State: wire.StateRunning, StartedAt: startedAt + 1},
			{InvocationID: "inv-03", State: wire.StateRunning, StartedAt: startedAt + 2},
		},
		UpdatedCapabilities: updatedCapabilities(),
	}
}

func invocationFields(id string, at float64) M {
	return M{"invocation_id": id, "state": "running", "started_at": at, "exit_code": nil, "stdout_tail": ""}
}

func pollRequestFields() M {
	return M{
		"worker_id": workerID,
		"queue":     "gpu*",
		"timeout_s": 20.0,
		"cursor":    nil,
		"invocations": []any{
			invocationFields("inv-01", startedAt),
			invocationFields("inv-02", startedAt+1),
			invocationFields("inv-03", startedAt+2),
		},
		"updated_capabilities": updatedCapabilitiesFields(),
	}
}

var pollRequestNullable = []string{"cursor", "invocations.[].exit_code", "updated_capabilities"}

func hibernate() *wire.Hibernate { return &wire.Hibernate{UntilEpochS: 1764413600} }

func hibernateFields() M { return M{"until_epoch_s": 1764413600} }

func setup() *wire.Setup {
	return &wire.Setup{
		Script:              "command -v docker || apt-get install -y docker.io",
		Sudo:                true,
		RefreshCapabilities: true,
		Name:                ptr("install-docker"),
	}
}

func setupFields() M {
	return M{
		"script":               "command -v docker || apt-get install -y docker.io",
		"sudo":                 true,
		"refresh_capabilities": true,
		"name":                 "install-docker",
	}
}

func payloadRef() *wire.PayloadRef {
	return &wire.PayloadRef{
		Bucket:      "nymph-payloads",
		Key:         "ns/default/payloads/01JD3S6Z8Q",
		Size:        1048576,
		ContentType: "application/x-msgpack",
		SHA256:      ptr(sha256Hex),
	}
}

func payloadRefFields() M {
	return M{
		"bucket":       "nymph-payloads",
		"key":          "ns/default/payloads/01JD3S6Z8Q",
		"size":         1048576,
		"content_type": "application/x-msgpack",
		"sha256":       sha256Hex,
	}
}

func exec() *wire.Exec {
	return &wire.Exec{
		ExecID:   "ex_01JD3S6Z8Q4K",
		Command:  "python3 train.py --epochs 3",
		Env:      map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
		Stdin:    "yes\n",
		Workdir:  ptr("/srv/job"),
		TimeoutS: ptr(wire.Number(3600)),
		Log: &wire.LogSink{
			StdoutURL:  "https://cp.example.test/v1/daemon/exec/ex_01JD3S6Z8Q4K/chunk",
			StdinURL:   ptr("https://cp.example.test/v1/daemon/exec/ex_01JD3S6Z8Q4K/stdin"),
			ControlURL: ptr("https://cp.example.test/v1/daemon/exec/ex_01JD3S6Z8Q4K/control"),
			FlushMS:    250,
			FlushBytes: 65536,
		},
		PayloadInline: wire.Blob("inline-args"),
		PayloadRef:    payloadRef(),
	}
}

func execFields() M {
	return M{
		"exec_id":   "ex_01JD3S6Z8Q4K",
		"command":   "python3 train.py --epochs 3",
		"env":       Verbatim{"CUDA_VISIBLE_DEVICES": "0"},
		"stdin":     "yes\n",
		"workdir":   "/srv/job",
		"timeout_s": 3600,
		"log": M{
			"stdout_url":  "https://cp.example.test/v1/daemon/exec/ex_01JD3S6Z8Q4K/chunk",
			"stdin_url":   "https://cp.example.test/v1/daemon/exec/ex_01JD3S6Z8Q4K/stdin",
			"control_url": "https://cp.example.test/v1/daemon/exec/ex_01JD3S6Z8Q4K/control",
			"flush_ms":    250,
			"flush_bytes": 65536,
		},
		"payload_inline": []byte("inline-args"),
		"payload_ref":    payloadRefFields(),
	}
}

var execNullable = []string{
	"workdir", "timeout_s", "log", "log.stdin_url", "log.control_url",
	"payload_inline", "payload_ref", "payload_ref.sha256", "payload_ref.content_type",
}

// The smallest exec a control plane may send: env and stdin are required.
func execMinimal() *wire.Exec {
	return &wire.Exec{ExecID: "ex_01JD3S6Z8Q4L", Command: "uname -a"}
}

func execMinimalFields() M {
	return M{"exec_id": "ex_01JD3S6Z8Q4L", "command": "uname -a", "env": Verbatim{}, "stdin": ""}
}

func otaUpdate() *wire.OTAUpdate {
	return &wire.OTAUpdate{
		Version: "0.2.0",
		URL:     "https://cp.example.test/bin/nymph-x86_64-unknown-linux-gnu-0.2.0",
		SHA256:  sha256Hex,
	}
}

func otaUpdateFields() M {
	return M{
		"version": "0.2.0",
		"url":     "https://cp.example.test/bin/nymph-x86_64-unknown-linux-gnu-0.2.0",
		"sha256":  sha256Hex,
	}
}

func run() *wire.Run {
	return &wire.Run{
		InvocationID: "inv-04",
		Function:     wire.Function{Module: "pipeline.train", Qualname: "Trainer.fit"},
		RunConfig: wire.RunConfig{
			Runner: "docker",
			Image:  "ghcr.example.test/lab/train:1.4",
			Docker: &wire.DockerConfig{
				Network: "none",
				Env:     map[string]string{"OMP_NUM_THREADS": "8"},
				Volumes: []string{"/data:/data:ro"},
				Args:    []string{"--shm-size=8g"},
				RegistryAuth: &wire.RegistryAuth{
					Server:      "ghcr.example.test",
					Username:    "lab-bot",
					PasswordEnv: "GHCR_TOKEN",
				},
			},
		},
		ArgsBlob:           argsBlob,
		ParentInvocationID: nil,
		RootInvocationID:   ptr("inv-root"),
		Script:             ptr("python -m pipeline.train"),
		AsUser:             ptr("lab"),
	}
}

func runFields() M {
	return M{
		"invocation_id": "inv-04",
		"function":      M{"module": "pipeline.train", "qualname": "Trainer.fit"},
		"run_config": M{
			"runner": "docker",
			"image":  "ghcr.example.test/lab/train:1.4",
			"docker": M{
				"network": "none",
				"env":     Verbatim{"OMP_NUM_THREADS": "8"},
				"volumes": []any{"/data:/data:ro"},
				"args":    []any{"--shm-size=8g"},
				"registry_auth": M{
					"server":       "ghcr.example.test",
					"username":     "lab-bot",
					"password_env": "GHCR_TOKEN",
				},
			},
		},
		"args_blob":            argsBlob,
		"parent_invocation_id": nil,
		"root_invocation_id":   "inv-root",
		"script":               "python -m pipeline.train",
		"as_user":              "lab",
	}
}

var runNullable = []string{
	"parent_invocation_id", "root_invocation_id", "script", "as_user", "args_blob",
	"run_config.docker", "run_config.docker.registry_auth",
}

// cancel is extension "cancel": one running run to stop.
func cancel() *wire.Cancel {
	return &wire.Cancel{InvocationID: "inv-04", Reason: "wrong input"}
}

func cancelFields() M {
	return M{"invocation_id": "inv-04", "reason": "wrong input"}
}

// runPayloadRef is a run whose arguments were over the inline threshold:
// args_blob is empty and payload_ref names them in the payload store.
func runPayloadRef() *wire.Run {
	return &wire.Run{
		InvocationID:       "inv-07",
		Function:           wire.Function{Module: "pipeline.train", Qualname: "Trainer.fit"},
		RunConfig:          wire.RunConfig{Runner: "process"},
		ArgsBlob:           []byte{},
		ParentInvocationID: nil,
		RootInvocationID:   nil,
		PayloadRef:         payloadRef(),
	}
}

func runPayloadRefFields() M {
	return M{
		"invocation_id":        "inv-07",
		"function":             M{"module": "pipeline.train", "qualname": "Trainer.fit"},
		"run_config":           M{"runner": "process"},
		"args_blob":            []byte{},
		"parent_invocation_id": nil,
		"root_invocation_id":   nil,
		"payload_ref":          payloadRefFields(),
	}
}

func runSlurm() *wire.Run {
	return &wire.Run{
		InvocationID: "inv-05",
		Function:     wire.Function{Module: "sim.ocean", Qualname: "step"},
		RunConfig: wire.RunConfig{
			Runner: "slurm",
			Slurm: &wire.SlurmConfig{
				Partition:     "gpu",
				Time:          "01:00:00",
				Gres:          "gpu:a100:2",
				Nodes:         "2",
				NtasksPerNode: "4",
				CPUsPerTask:   "8",
				Mem:           "64G",
				PollIntervalS: ptr(wire.Number(5)),
			},
		},
		ArgsBlob:           []byte{},
		ParentInvocationID: ptr("inv-04"),
		RootInvocationID:   ptr("inv-root"),
	}
}

func runSlurmFields() M {
	return M{
		"invocation_id": "inv-05",
		"function":      M{"module": "sim.ocean", "qualname": "step"},
		"run_config": M{
			"runner": "slurm",
			"slurm": M{
				"partition":       "gpu",
				"time":            "01:00:00",
				"gres":            "gpu:a100:2",
				"nodes":           "2",
				"ntasks-per-node": "4",
				"cpus-per-task":   "8",
				"mem":             "64G",
				"poll_interval_s": 5,
			},
		},
		"args_blob":            []byte{},
		"parent_invocation_id": "inv-04",
		"root_invocation_id":   "inv-root",
	}
}

func runKube() *wire.Run {
	return &wire.Run{
		InvocationID: "inv-06",
		Function:     wire.Function{Module: "serve.batch", Qualname: "score"},
		RunConfig: wire.RunConfig{
			Runner: "kube",
			Image:  "ghcr.example.test/lab/score:2.0",
			Kube: &wire.KubeConfig{
				Namespace:     "lab",
				Context:       "kind-nymph",
				GPU:           "1",
				CPU:           "2",
				Memory:        "8Gi",
				PollIntervalS: ptr(wire.Number(2.5)),
				PVC:           "shared-work",
			},
		},
		ArgsBlob: []byte{0xc0},
	}
}

func runKubeFields() M {
	return M{
		"invocation_id": "inv-06",
		"function":      M{"module": "serve.batch", "qualname": "score"},
		"run_config": M{
			"runner": "kube",
			"image":  "ghcr.example.test/lab/score:2.0",
			"kube": M{
				"namespace":       "lab",
				"context":         "kind-nymph",
				"gpu":             "1",
				"cpu":             "2",
				"memory":          "8Gi",
				"poll_interval_s": 2.5,
				"pvc":             "shared-work",
			},
		},
		"args_blob":            []byte{0xc0},
		"parent_invocation_id": nil,
		"root_invocation_id":   nil,
	}
}

// pollResponse carries one command of each kind, in the protocol's order.
func pollResponse() *wire.PollResponse {
	return &wire.PollResponse{
		Commands: []wire.Command{
			{ID: "cmd-1", Kind: wire.KindHibernate, Body: mustEncode(hibernate())},
			{ID: "cmd-2", Kind: wire.KindSetup, Body: mustEncode(setup())},
			{ID: "cmd-3", Kind: wire.KindExec, Body: mustEncode(exec())},
			{ID: "cmd-4", Kind: wire.KindOTAUpdate, Body: mustEncode(otaUpdate())},
			{ID: "cmd-5", Kind: wire.KindResetBackoff, Body: nil},
			{ID: "cmd-6", Kind: wire.KindRotateKey, Body: nil},
			{ID: "cmd-7", Kind: wire.KindRun, Body: mustEncode(run())},
		},
		TargetNymphVersion: ptr("0.2.0"),
	}
}

func pollResponseFields() M {
	cmd := func(id, kind string, body any) M { return M{"id": id, "kind": kind, "body": body} }
	return M{
		"commands": []any{
			cmd("cmd-1", "hibernate", Verbatim(hibernateFields())),
			cmd("cmd-2", "setup", Verbatim(setupFields())),
			cmd("cmd-3", "exec", Verbatim(execFields())),
			cmd("cmd-4", "ota_update", Verbatim(otaUpdateFields())),
			cmd("cmd-5", "reset_backoff", nil),
			cmd("cmd-6", "rotate_key", nil),
			cmd("cmd-7", "run", Verbatim(runFields())),
		},
		"target_nymph_version": "0.2.0",
	}
}

// PollResponseOneExec is the poll response of the benchmarks: one exec.
func PollResponseOneExec() *wire.PollResponse {
	return &wire.PollResponse{
		Commands:           []wire.Command{{ID: "cmd-3", Kind: wire.KindExec, Body: mustEncode(exec())}},
		TargetNymphVersion: nil,
	}
}

func ackFailed() *wire.Ack {
	return &wire.Ack{
		InvocationID: "inv-04",
		State:        wire.StateFailed,
		ResultBlob:   wire.SharedBlob{},
		Error: &wire.ErrorInfo{
			TypeName:  "ValueError",
			Message:   "learning rate must be positive",
			Traceback: ptr("Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError"),
		},
		WorkerID: workerID,
	}
}

func ackFailedFields() M {
	return M{
		"invocation_id": "inv-04",
		"state":         "failed",
		"result_blob":   []byte{},
		"error": M{
			"type":      "ValueError",
			"message":   "learning rate must be positive",
			"traceback": "Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError",
		},
		"worker_id": workerID,
	}
}

// A succeeded ack without a worker id: error null, worker_id omitted.
func ackSucceeded() *wire.Ack {
	return &wire.Ack{InvocationID: "inv-05", State: wire.StateSucceeded, ResultBlob: wire.SharedBlob{0x93, 1, 2, 3}}
}

func ackSucceededFields() M {
	return M{"invocation_id": "inv-05", "state": "succeeded", "result_blob": []byte{0x93, 1, 2, 3}, "error": nil}
}

func execResult() *wire.ExecResult {
	return &wire.ExecResult{
		ExitCode:   0,
		Stdout:     "epoch 1/3\nepoch 2/3\n",
		Stderr:     "",
		DurationMS: 61234,
		Error:      ptr(wire.TruncatedStdout),
	}
}

func execResultFields() M {
	return M{
		"exit_code":     0,
		"stdout":        "epoch 1/3\nepoch 2/3\n",
		"stderr":        "",
		"duration_ms":   61234,
		"error":         "stdout truncated",
		"result_inline": nil,
		"result_ref":    nil,
	}
}

// A timed-out exec: the -2 sentinel, no error key.
func execResultTimeout() *wire.ExecResult {
	return &wire.ExecResult{ExitCode: wire.ExitTimeout, Stdout: "", Stderr: "killed\n", DurationMS: 30001}
}

func execResultTimeoutFields() M {
	return M{
		"exit_code": -2, "stdout": "", "stderr": "killed\n", "duration_ms": 30001,
		"result_inline": nil, "result_ref": nil,
	}
}

func presignRequest() *wire.PresignRequest {
	return &wire.PresignRequest{Op: "get", Key: "ns/default/payloads/01JD3S6Z8Q", Size: ptr(wire.Int(1048576)), JobID: "job-42", Kind: "args"}
}

func presignRequestFields() M {
	return M{"op": "get", "key": "ns/default/payloads/01JD3S6Z8Q", "size": 1048576, "jobId": "job-42", "kind": "args"}
}

func presignResponse() *wire.PresignResponse {
	return &wire.PresignResponse{
		URL:       "https://store.example.test/nymph-payloads/ns/default/payloads/01JD3S6Z8Q?sig=abc",
		Method:    "GET",
		Headers:   map[string]string{"x-amz-checksum-mode": "ENABLED"},
		ExpiresAt: 1764413600,
	}
}

func presignResponseFields() M {
	return M{
		"url":       "https://store.example.test/nymph-payloads/ns/default/payloads/01JD3S6Z8Q?sig=abc",
		"method":    "GET",
		"headers":   Verbatim{"x-amz-checksum-mode": "ENABLED"},
		"expiresAt": 1764413600,
	}
}

func keyRotationRequest() *wire.KeyRotationRequest {
	return &wire.KeyRotationRequest{WorkerID: workerID, NewPublicKey: "Ym9ndXMtbmV3LWtleS0zMi1ieXRlcy1sb25nLXh4eA", OldKeyID: keyID}
}

func keyRotationRequestFields() M {
	return M{"worker_id": workerID, "new_public_key": "Ym9ndXMtbmV3LWtleS0zMi1ieXRlcy1sb25nLXh4eA", "old_key_id": keyID}
}

func keyRotationResponse() *wire.KeyRotationResponse {
	return &wire.KeyRotationResponse{KeyID: "key_01JD4A0000000000000000000"}
}

func keyRotationResponseFields() M {
	return M{"key_id": "key_01JD4A0000000000000000000", "reject": nil}
}

// relayRequest is a log chunk through a relay, with every extension key.
func relayRequest() *wire.RelayRequest {
	return &wire.RelayRequest{
		Endpoint: "/v1/daemon/exec/ex_01JD3S6Z8Q4K/chunk",
		Headers: map[string]string{
			"X-LS-Daemon-Authorization": "Bearer dlb_bootstrap-token",
		},
		ContentType: wire.ContentTypeOctets,
		ID:          sessionULID + ".17",
		Body:        []byte("epoch 3/3\n"),
	}
}

func relayRequestFields() M {
	return M{
		"endpoint": "/v1/daemon/exec/ex_01JD3S6Z8Q4K/chunk",
		"headers": Verbatim{
			"X-LS-Daemon-Authorization": "Bearer dlb_bootstrap-token",
		},
		"content_type": "application/octet-stream",
		"id":           sessionULID + ".17",
		"body":         []byte("epoch 3/3\n"),
	}
}

// relayRequestPlain is the envelope without extensions (docs/protocol.md,
// "Request envelope"), carrying a poll.
func relayRequestPlain() *wire.RelayRequest {
	return &wire.RelayRequest{Endpoint: wire.PathPoll, Body: mustEncode(pollRequest())}
}

func relayRequestPlainFields() M {
	return M{"endpoint": "/v1/daemon/poll", "body": mustEncode(pollRequest())}
}

func relayReply() *wire.RelayReply {
	return &wire.RelayReply{ID: sessionULID + ".18", Status: 200, Body: mustEncode(helloResponse())}
}

func relayReplyFields() M {
	return M{"id": sessionULID + ".18", "status": 200, "body": mustEncode(helloResponse())}
}

func relayReplyFailed() *wire.RelayReply {
	return &wire.RelayReply{
		ID:         sessionULID + ".19",
		Status:     0,
		Body:       []byte{},
		RelayError: &wire.RelayReplyError{Message: "upstream: dial tcp 127.0.0.1:9: connection refused"},
	}
}

func relayReplyFailedFields() M {
	return M{
		"id":          sessionULID + ".19",
		"status":      0,
		"body":        []byte{},
		"relay_error": M{"message": "upstream: dial tcp 127.0.0.1:9: connection refused"},
	}
}

// relayError is the raw reply for a request without id whose upstream
// answered 422: the upstream's body is carried through.
func relayError() *wire.RelayErrorReply {
	return &wire.RelayErrorReply{RelayError: wire.RelayFailure{
		Status:  422,
		Message: "upstream answered 422 Unprocessable Entity",
		Body:    mustEncode(validationError()),
	}}
}

func relayErrorFields() M {
	return M{"relay_error": M{
		"status":  422,
		"message": "upstream answered 422 Unprocessable Entity",
		"body":    mustEncode(validationError()),
	}}
}

func vec[T any, P interface {
	*T
	Message
}](name string, v P, fields M, nullable ...string) Vector {
	return Vector{Name: name, Value: v, New: func() Message { return P(new(T)) }, Fields: fields, Nullable: nullable}
}

// All returns every vector, freshly built (callers may modify them).
func All() []Vector {
	return []Vector{
		vec("hello_request", helloRequest(), helloRequestFields(), helloRequestNullable...),
		vec("hello_request_minimal", helloRequestMinimal(), helloRequestMinimalFields(), helloRequestNullable...),
		vec("hello_response", helloResponse(), helloResponseFields(), helloResponseNullable...),
		vec("hello_response_reject", helloResponseReject(), helloResponseRejectFields(), helloResponseNullable...),
		vec("validation_error", validationError(), M{"error": "missing field", "field": "capabilities.runners"}),
		vec("poll_request", pollRequest(), pollRequestFields(), pollRequestNullable...),
		vec("poll_response", pollResponse(), pollResponseFields(), "target_nymph_version", "commands.[].body"),
		vec("command_hibernate", hibernate(), hibernateFields()),
		vec("command_setup", setup(), setupFields(), "name"),
		vec("command_exec", exec(), execFields(), execNullable...),
		vec("command_exec_minimal", execMinimal(), execMinimalFields()),
		vec("command_ota_update", otaUpdate(), otaUpdateFields()),
		vec("command_run", run(), runFields(), runNullable...),
		vec("command_cancel", cancel(), cancelFields()),
		vec("command_run_payload_ref", runPayloadRef(), runPayloadRefFields(), "parent_invocation_id", "root_invocation_id",
			"payload_ref.sha256", "payload_ref.content_type"),
		vec("command_run_slurm", runSlurm(), runSlurmFields(), "run_config.slurm", "run_config.slurm.poll_interval_s",
			"run_config.slurm.nodes", "run_config.slurm.ntasks-per-node", "run_config.slurm.cpus-per-task", "run_config.slurm.mem"),
		vec("command_run_kube", runKube(), runKubeFields(), "run_config.kube", "run_config.kube.poll_interval_s",
			"run_config.kube.gpu", "run_config.kube.cpu", "run_config.kube.memory"),
		vec("ack_failed", ackFailed(), ackFailedFields(), "error", "error.traceback", "result_blob"),
		vec("ack_succeeded", ackSucceeded(), ackSucceededFields(), "error", "result_blob"),
		vec("exec_result", execResult(), execResultFields(), "error", "result_inline", "result_ref"),
		vec("exec_result_timeout", execResultTimeout(), execResultTimeoutFields(), "result_inline", "result_ref"),
		vec("presign_request", presignRequest(), presignRequestFields(), "size"),
		vec("presign_response", presignResponse(), presignResponseFields()),
		vec("payload_ref", payloadRef(), payloadRefFields(), "sha256", "content_type"),
		vec("key_rotation_request", keyRotationRequest(), keyRotationRequestFields()),
		vec("key_rotation_response", keyRotationResponse(), keyRotationResponseFields(), "reject"),
		vec("relay_request", relayRequest(), relayRequestFields()),
		vec("relay_request_plain", relayRequestPlain(), relayRequestPlainFields()),
		vec("relay_reply", relayReply(), relayReplyFields(), "relay_error"),
		vec("relay_reply_failed", relayReplyFailed(), relayReplyFailedFields(), "relay_error"),
		vec("relay_error", relayError(), relayErrorFields()),
	}
}
