// Package daemonconfig reads udf-daemon.toml once at boot and applies the
// flag and environment overrides on top (docs/architecture.md, "How a
// daemon behaves": boot).
//
// It decides where the file is looked up, the built-in defaults, which keys
// exist and what types they take (any numeric key accepts an int or a
// float; [daemon] tags accepts an array of "k=v" or a table), and the order
// of precedence: flag, then environment, then file, then default. Unknown
// keys are reported, not fatal. It does not decide what the values mean at
// run time, and it never re-reads the file.
package daemonconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/nymphd/nymph/hostio/blobcache"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Config is the effective daemon configuration. Its toml tags are the key
// names of udf-daemon.toml; --print-config marshals it back to TOML.
type Config struct {
	Server     Server     `toml:"server"`
	Daemon     Daemon     `toml:"daemon"`
	Runtime    Runtime    `toml:"runtime"`
	Poll       Poll       `toml:"poll"`
	Shutdown   Shutdown   `toml:"shutdown"`
	Introspect Introspect `toml:"introspect"`
	Identity   Identity   `toml:"identity"`
	Mounts     Mounts     `toml:"mounts"`
	Log        Log        `toml:"log"`
}

// Mounts is [mounts]: the blob cache payloads are kept in (spec 003,
// "Mounts"), content-addressed by SHA-256.
type Mounts struct {
	// CacheDir is the cache's directory; empty is "cache" beside
	// [runtime] workdir (/var/lib/dreamlake/cache by default).
	CacheDir string `toml:"cache_dir"`
	// CacheMaxBytes bounds the cache; least recently used payloads go
	// first (default 20 GiB).
	CacheMaxBytes int64 `toml:"cache_max_bytes"`
}

// CacheDir is [mounts] cache_dir, or its default beside the workdir.
func (c Config) CacheDir() string {
	if c.Mounts.CacheDir != "" {
		return c.Mounts.CacheDir
	}
	return filepath.Join(filepath.Dir(c.Runtime.Workdir), "cache")
}

// Server is [server]: where the control plane is and how to reach it.
type Server struct {
	URL       string `toml:"url"`
	TokenFile string `toml:"token_file"`
	// CAFile holds the CA an https control plane's certificate must be
	// signed by (nymph serve's DATA-DIR/tls/ca.crt); empty trusts the
	// system's roots.
	CAFile    string `toml:"ca_file"`
	Namespace string `toml:"namespace"`
	// Transport is "direct", "fifo" or "spool".
	Transport string `toml:"transport"`
	// RelayDir is the machine directory of the fifo and spool transports.
	RelayDir string `toml:"relay_dir"`
	// RelayReplies is "id" (replies carry the request id) or "raw" (a relay
	// that answers with raw bytes).
	RelayReplies    string `toml:"relay_replies"`
	SpoolIntervalMS int    `toml:"spool_interval_ms"`
	// Extensions announces nymph's protocol extensions in the hello
	// (docs/protocol.md, "Extensions"); false speaks plain protocol "1",
	// for a control plane that refuses a hello with a key it does not know.
	Extensions bool `toml:"extensions"`
}

// Daemon is [daemon]: who this daemon says it is.
type Daemon struct {
	// MachineID "auto" or empty resolves to the hostname.
	MachineID string   `toml:"machine_id"`
	Label     string   `toml:"label"`
	Tags      []string `toml:"tags"`
	Lanes     []string `toml:"lanes"`
	Queue     string   `toml:"queue"`
}

// Runtime is [runtime]: what the daemon runs and how much at once.
type Runtime struct {
	// MaxInvocations bounds runs and execs together; 0 is unbounded.
	MaxInvocations int `toml:"max_invocations"`
	// KeepAliveS is the idle policy: -1 never exits, 0 exits when idle, N
	// seconds of continuous idleness.
	KeepAliveS    float64  `toml:"keep_alive_s"`
	Workdir       string   `toml:"workdir"`
	Runners       []string `toml:"runners"`
	DefaultRunner string   `toml:"default_runner"`
	Entry         []string `toml:"entry"`
	// ContainerEntry is the entry argv inside a container or Pod (docker,
	// gvisor, kube): images ship `python`, not the host's `python3`.
	ContainerEntry           []string `toml:"container_entry"`
	AutoUpdate               bool     `toml:"auto_update"`
	AutoUpdateCheckIntervalS float64  `toml:"auto_update_check_interval_s"`
}

// Poll is [poll]: the long-poll wait and the error backoff bounds.
type Poll struct {
	WaitMaxS  float64 `toml:"wait_max_s"`
	RetryMinS float64 `toml:"retry_min_s"`
	RetryMaxS float64 `toml:"retry_max_s"`
}

// Shutdown is [shutdown]: how long a drain waits before killing.
type Shutdown struct {
	GraceS float64 `toml:"grace_s"`
}

// Introspect is [introspect]: the optional loopback status server.
type Introspect struct {
	Enabled bool   `toml:"enabled"`
	Listen  string `toml:"listen"`
}

// Identity is [identity]: the per-host signing key (a seam for now).
type Identity struct {
	Enabled bool   `toml:"enabled"`
	KeyFile string `toml:"key_file"`
}

// Log is [log]: slog output format ("text" or "json") and level.
type Log struct {
	Format string `toml:"format"`
	// Level is a wire.LogLevel's canonical name once Validate has passed
	// the config: the file may also spell it in any case or by an alias
	// ("warning"), and Validate resolves that once, so the logger and the
	// machine's live log.level see one name per level.
	Level string `toml:"level"`
}

// Defaults returns the built-in configuration used when no file exists.
// The keys the daemon core has defaults for take the core's
// (daemon.DefaultConfig: retry_min_s 1 and retry_max_s 60, so a lost plane
// is retried within a second and a long outage settles at one attempt a
// minute per daemon); the control plane is nymph serve's default address
// on this host, and the entry programs are the runners' defaults.
func Defaults() Config {
	core := daemon.DefaultConfig()
	return Config{
		Server: Server{
			URL:             wire.DefaultServerURL,
			Namespace:       "default",
			Transport:       "direct",
			RelayReplies:    "id",
			SpoolIntervalMS: 100,
			Extensions:      true,
		},
		Daemon: Daemon{MachineID: "auto", Queue: core.Queue},
		Runtime: Runtime{
			MaxInvocations:           core.MaxInvocations,
			KeepAliveS:               core.KeepAliveS,
			Workdir:                  "/var/lib/dreamlake/udf",
			Runners:                  core.Runners,
			DefaultRunner:            core.DefaultRunner,
			Entry:                    slices.Clone(runners.DefaultEntry),
			ContainerEntry:           slices.Clone(runners.DefaultContainerEntry),
			AutoUpdateCheckIntervalS: 3600,
		},
		Poll:       Poll{WaitMaxS: core.WaitMaxS, RetryMinS: core.RetryMinS, RetryMaxS: core.RetryMaxS},
		Shutdown:   Shutdown{GraceS: core.GraceS},
		Introspect: Introspect{Listen: "127.0.0.1:8390"},
		Mounts:     Mounts{CacheMaxBytes: blobcache.DefaultMaxBytes},
		Log:        Log{Format: "text", Level: "info"},
	}
}

// SystemPath is the machine-wide config file. The names dreamlake and
// udf-daemon.toml (and the default workdir /var/lib/dreamlake/udf) are
// the protocol's first implementation's; nymph keeps them so that hosts
// provisioned for it need no change (docs/architecture.md, "Inherited
// names").
const SystemPath = "/etc/dreamlake/udf-daemon.toml"

// Lookup says where to look for the file; tests replace every part.
type Lookup struct {
	// Explicit is --config; when set it must exist.
	Explicit string
	// SystemPath defaults to /etc/dreamlake/udf-daemon.toml.
	SystemPath string
	// Getenv reads HOME (for $HOME/.config/dreamlake/udf-daemon.toml).
	Getenv func(string) string
	// ReadFile defaults to os.ReadFile.
	ReadFile func(string) ([]byte, error)
}

// Loaded is the result of Load: the config, the file it came from ("" for
// built-in defaults) and the unknown keys that were ignored.
type Loaded struct {
	Config  Config
	Path    string
	Unknown []string
}

// Load finds and reads the config file (or falls back to the defaults).
func Load(l Lookup) (Loaded, error) {
	read := l.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	if l.Explicit != "" {
		data, err := read(l.Explicit)
		if err != nil {
			return Loaded{}, fmt.Errorf("daemonconfig: read %s: %w", l.Explicit, err)
		}
		return Parse(l.Explicit, data)
	}
	for _, p := range l.candidates() {
		data, err := read(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Loaded{}, fmt.Errorf("daemonconfig: read %s: %w", p, err)
		}
		return Parse(p, data)
	}
	return Loaded{Config: Defaults()}, nil
}

func (l Lookup) candidates() []string {
	sys := l.SystemPath
	if sys == "" {
		sys = SystemPath
	}
	out := []string{sys}
	if l.Getenv != nil {
		if home := l.Getenv("HOME"); home != "" {
			out = append(out, filepath.Join(home, ".config", "dreamlake", "udf-daemon.toml"))
		}
	}
	return out
}

// Parse decodes one file's bytes over the defaults. path names the file in
// errors.
func Parse(path string, data []byte) (Loaded, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return Loaded{}, fmt.Errorf("daemonconfig: %s:%d:%d: %v", path, row, col, err)
		}
		return Loaded{}, fmt.Errorf("daemonconfig: %s: %w", path, err)
	}
	cfg := Defaults()
	d := decoder{path: path}
	d.document(doc, &cfg)
	if d.err != nil {
		return Loaded{}, d.err
	}
	if err := cfg.Validate(); err != nil {
		return Loaded{}, fmt.Errorf("daemonconfig: %s: %w", path, err)
	}
	sort.Strings(d.unknown)
	return Loaded{Config: cfg, Path: path, Unknown: d.unknown}, nil
}

// MaxSeconds bounds every span in seconds the config gives (about 31
// years): longer means nothing to a daemon, and far longer would overflow
// a time.Duration.
const MaxSeconds = 1e9

// Validate checks values whose type is right but whose meaning is not.
// It also stores log.level by its canonical name (Log.Level), the one
// value it rewrites: every config the daemon runs with passes here.
func (c *Config) Validate() error {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	// Every comparison below is false for NaN, so a NaN (or an infinity,
	// or a span no clock could wait) would pass them all unseen.
	for _, f := range []struct {
		key string
		v   float64
	}{
		{"runtime.keep_alive_s", c.Runtime.KeepAliveS},
		{"runtime.auto_update_check_interval_s", c.Runtime.AutoUpdateCheckIntervalS},
		{"poll.wait_max_s", c.Poll.WaitMaxS},
		{"poll.retry_min_s", c.Poll.RetryMinS},
		{"poll.retry_max_s", c.Poll.RetryMaxS},
		{"shutdown.grace_s", c.Shutdown.GraceS},
	} {
		if math.IsNaN(f.v) || math.Abs(f.v) > MaxSeconds {
			bad("%s = %v: want a number of seconds up to %v", f.key, f.v, float64(MaxSeconds))
		}
	}
	switch c.Server.Transport {
	case "direct", "fifo", "spool":
	default:
		bad("server.transport = %q: want direct, fifo or spool", c.Server.Transport)
	}
	if (c.Server.Transport == "fifo" || c.Server.Transport == "spool") && c.Server.RelayDir == "" {
		bad("server.relay_dir is required with transport %q", c.Server.Transport)
	}
	switch c.Server.RelayReplies {
	case "id", "raw":
	default:
		bad("server.relay_replies = %q: want id or raw", c.Server.RelayReplies)
	}
	if c.Server.SpoolIntervalMS <= 0 {
		bad("server.spool_interval_ms = %d: want > 0", c.Server.SpoolIntervalMS)
	}
	if c.Runtime.MaxInvocations < 0 {
		bad("runtime.max_invocations = %d: want >= 0 (0 is unbounded)", c.Runtime.MaxInvocations)
	}
	if c.Runtime.KeepAliveS < -1 {
		bad("runtime.keep_alive_s = %v: want -1, 0 or a number of seconds", c.Runtime.KeepAliveS)
	}
	if c.Runtime.Workdir == "" {
		bad("runtime.workdir is empty")
	}
	if len(c.Runtime.Entry) == 0 {
		bad("runtime.entry is empty")
	}
	if len(c.Runtime.ContainerEntry) == 0 {
		bad("runtime.container_entry is empty")
	}
	if c.Poll.WaitMaxS <= 0 {
		bad("poll.wait_max_s = %v: want > 0", c.Poll.WaitMaxS)
	}
	if c.Poll.RetryMinS <= 0 || !wire.RetryBoundsOrdered(c.Poll.RetryMinS, c.Poll.RetryMaxS) {
		bad("poll.retry_min_s = %v, poll.retry_max_s = %v: want 0 < min <= max", c.Poll.RetryMinS, c.Poll.RetryMaxS)
	}
	if c.Mounts.CacheMaxBytes <= 0 {
		bad("mounts.cache_max_bytes = %d: want > 0", c.Mounts.CacheMaxBytes)
	}
	if c.Shutdown.GraceS < 0 {
		bad("shutdown.grace_s = %v: want >= 0", c.Shutdown.GraceS)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format = %q: want text or json", c.Log.Format)
	}
	if l, ok := wire.ParseFileLogLevel(c.Log.Level); ok {
		c.Log.Level = string(l)
	} else {
		bad("log.level = %q: want %s", c.Log.Level, wire.LogLevelChoices)
	}
	for _, t := range c.Daemon.Tags {
		if k, _, ok := strings.Cut(t, "="); !ok || k == "" {
			bad("daemon.tags: %q is not key=value", t)
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// TOML renders the config as udf-daemon.toml (for --print-config).
func (c *Config) TOML() ([]byte, error) {
	b, err := toml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("daemonconfig: marshal: %w", err)
	}
	return b, nil
}
