package wire

// Arrays and maps announced longer than this are refused before anything is
// allocated for them (a count is 4 bytes; its elements would be far more).
//msgp:limit arrays:65536 maps:65536

// The seven command kinds of protocol "1", in the order the protocol lists them.
const (
	KindHibernate    = "hibernate"
	KindSetup        = "setup"
	KindExec         = "exec"
	KindOTAUpdate    = "ota_update"
	KindResetBackoff = "reset_backoff"
	KindRotateKey    = "rotate_key"
	KindRun          = "run"
	// KindCancel is nymph's extension ExtCancel: sent only to a daemon
	// that announced it, never part of the seven.
	KindCancel = "cancel"
)

// Cancel asks the daemon to stop one run or one exec (exactly one of the
// two ids) the way a drain's second signal does, and report it killed
// with {type: "Cancelled", message: Reason}.
type Cancel struct {
	InvocationID string `msg:"invocation_id,omitempty"`
	ExecID       string `msg:"exec_id,omitempty"`
	Reason       string `msg:"reason"`
}

// Hibernate asks the daemon to leave its poll loop until UntilEpochS.
type Hibernate struct {
	UntilEpochS Number `msg:"until_epoch_s"`
}

// Setup is a host-provisioning script run as a synthetic invocation.
type Setup struct {
	Script              string  `msg:"script"`
	Sudo                bool    `msg:"sudo,omitempty"`
	RefreshCapabilities bool    `msg:"refresh_capabilities,omitempty"`
	Name                *string `msg:"name,omitempty"`
}

// Exec is a shell command run under `bash -c`. Env and Stdin are always
// written, as an empty map and "" when there are none: protocol "1" lists
// them as required, and a daemon whose types say so cannot read an exec
// without them. A body that writes them as nil is still read (Dispatch
// retries without nil entries).
type Exec struct {
	ExecID        string            `msg:"exec_id"`
	Command       string            `msg:"command"`
	Env           map[string]string `msg:"env"`
	Stdin         string            `msg:"stdin"`
	Workdir       *string           `msg:"workdir,omitempty"`
	TimeoutS      *Number           `msg:"timeout_s,omitempty"`
	Log           *LogSink          `msg:"log,omitempty"`
	PayloadInline Blob              `msg:"payload_inline,omitzero"`
	PayloadRef    *PayloadRef       `msg:"payload_ref,omitempty"`
}

// LogSink switches an exec to streaming: output is posted to StdoutURL in
// chunks. StdinURL and ControlURL are reserved for interactive sessions.
type LogSink struct {
	StdoutURL  string  `msg:"stdout_url"`
	StdinURL   *string `msg:"stdin_url,omitempty"`
	ControlURL *string `msg:"control_url,omitempty"`
	FlushMS    Int     `msg:"flush_ms"`
	FlushBytes Int     `msg:"flush_bytes"`
}

// OTAUpdate asks the daemon to replace its own binary.
type OTAUpdate struct {
	Version string `msg:"version"`
	URL     string `msg:"url"`
	SHA256  string `msg:"sha256"`
}

// Run is one function invocation handed to a runner.
type Run struct {
	InvocationID       string    `msg:"invocation_id"`
	Function           Function  `msg:"function"`
	RunConfig          RunConfig `msg:"run_config"`
	ArgsBlob           Blob      `msg:"args_blob"`
	ParentInvocationID *string   `msg:"parent_invocation_id"`
	RootInvocationID   *string   `msg:"root_invocation_id"`
	// Script, when set, runs `bash -c <script>` instead of the entry program.
	Script *string `msg:"script,omitempty"`
	// AsUser wraps the spawn as `runuser -u <as_user> -- …`.
	AsUser *string `msg:"as_user,omitempty"`
	// PayloadRef, when set, holds the arguments instead of ArgsBlob (they
	// were over PayloadInlineThreshold): the daemon resolves it through
	// the payload store and writes its bytes to args.msgpack. Spec 001
	// "Payload store" names it on a run; it is omitted when nil.
	PayloadRef *PayloadRef `msg:"payload_ref,omitempty"`
}

// Function names the code a run invokes.
type Function struct {
	Module   string `msg:"module"`
	Qualname string `msg:"qualname"`
}

// RunConfig selects and configures the runner. Its JSON form (the
// operator API, ctl run --run-config) uses the wire's key names.
type RunConfig struct {
	// Runner is the runner kind; empty falls back to [runtime] default_runner.
	Runner string        `msg:"runner,omitempty" json:"runner,omitempty"`
	Image  string        `msg:"image,omitempty" json:"image,omitempty"`
	Docker *DockerConfig `msg:"docker,omitempty" json:"docker,omitempty"`
	Slurm  *SlurmConfig  `msg:"slurm,omitempty" json:"slurm,omitempty"`
	Kube   *KubeConfig   `msg:"kube,omitempty" json:"kube,omitempty"`
}

// DockerConfig is run_config.docker (also used by gvisor).
type DockerConfig struct {
	Network      string            `msg:"network,omitempty" json:"network,omitempty"`
	Env          map[string]string `msg:"env,omitempty,allownil" json:"env,omitempty"`
	Volumes      []string          `msg:"volumes,omitempty,allownil" json:"volumes,omitempty"`
	Args         []string          `msg:"args,omitempty,allownil" json:"args,omitempty"`
	RegistryAuth *RegistryAuth     `msg:"registry_auth,omitempty" json:"registry_auth,omitempty"`
}

// RegistryAuth is a docker registry login; PasswordEnv wins over Password.
type RegistryAuth struct {
	Server      string `msg:"server" json:"server"`
	Username    string `msg:"username" json:"username"`
	Password    string `msg:"password,omitempty" json:"password,omitempty"`
	PasswordEnv string `msg:"password_env,omitempty" json:"password_env,omitempty"`
}

// SlurmConfig is run_config.slurm. Text fields accept strings or numbers.
type SlurmConfig struct {
	Partition     string  `msg:"partition,omitempty" json:"partition,omitempty"`
	Time          string  `msg:"time,omitempty" json:"time,omitempty"`
	Gres          string  `msg:"gres,omitempty" json:"gres,omitempty"`
	Nodes         Text    `msg:"nodes,omitzero" json:"nodes,omitempty"`
	NtasksPerNode Text    `msg:"ntasks-per-node,omitzero" json:"ntasks-per-node,omitempty"`
	CPUsPerTask   Text    `msg:"cpus-per-task,omitzero" json:"cpus-per-task,omitempty"`
	Mem           Text    `msg:"mem,omitzero" json:"mem,omitempty"`
	PollIntervalS *Number `msg:"poll_interval_s,omitempty" json:"poll_interval_s,omitempty"`
}

// KubeConfig is run_config.kube. PVC names a ReadWriteMany claim that holds
// the workdir as a sub-path (for multi-node clusters); empty means hostPath.
// Image is the Pod's image: spec 003 lists it among the kube runner's
// keys, and run_config.image is taken when it is empty.
type KubeConfig struct {
	Image         string  `msg:"image,omitempty" json:"image,omitempty"`
	Namespace     string  `msg:"namespace,omitempty" json:"namespace,omitempty"`
	Context       string  `msg:"context,omitempty" json:"context,omitempty"`
	GPU           Text    `msg:"gpu,omitzero" json:"gpu,omitempty"`
	CPU           Text    `msg:"cpu,omitzero" json:"cpu,omitempty"`
	Memory        Text    `msg:"memory,omitzero" json:"memory,omitempty"`
	PollIntervalS *Number `msg:"poll_interval_s,omitempty" json:"poll_interval_s,omitempty"`
	PVC           string  `msg:"pvc,omitempty" json:"pvc,omitempty"`
}
