package daemonconfig

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/nymphd/nymph/wirecore/daemon"
)

// QueueEnv names the environment variable that picks the queue when
// --queue is not given. Its DREAMLAKE_ prefix is inherited from the
// protocol's first implementation, whose deployments set it.
const QueueEnv = "DREAMLAKE_QUEUE"

// CAFileEnv names the environment variable that gives the CA file when
// --ca-file is not given; nymph ctl reads the same one.
const CAFileEnv = "NYMPH_CA_FILE"

// Flags are the command-line settings of `nymph daemon`. Pointer fields are
// nil when the flag was not given, so "not set" and "set to the default"
// stay distinct.
type Flags struct {
	ConfigPath     string
	PrintConfig    bool
	Queue          *string
	Server         *string
	TokenFile      *string
	CAFile         *string
	Workdir        *string
	MaxInvocations *int
	KeepAliveS     *float64
	LogFormat      *string
}

// Register defines the daemon's flags on fs; read the result after
// fs.Parse.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.ConfigPath, "config", "", "path of udf-daemon.toml (default: "+SystemPath+", then $HOME/.config/dreamlake/udf-daemon.toml)")
	fs.BoolVar(&f.PrintConfig, "print-config", false, "print the effective configuration as TOML and exit")
	strFlag(fs, &f.Queue, "queue", "queue to poll (trailing * = prefix); else $"+QueueEnv+", else [daemon] queue, else default")
	strFlag(fs, &f.Server, "server", "control plane URL ([server] url)")
	strFlag(fs, &f.TokenFile, "token-file", "bootstrap bearer token file, mode 0600 ([server] token_file)")
	strFlag(fs, &f.CAFile, "ca-file", "CA certificate an https server must be signed by, e.g. nymph serve's DATA-DIR/tls/ca.crt; else $"+CAFileEnv+", else [server] ca_file, else the system's roots")
	strFlag(fs, &f.Workdir, "workdir", "root of invocation workdirs ([runtime] workdir)")
	strFlag(fs, &f.LogFormat, "log-format", "log format: text or json ([log] format)")
	fs.Func("max-invocations", "concurrent runs and execs, 0 unbounded ([runtime] max_invocations)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("want a whole number: %w", err)
		}
		f.MaxInvocations = &n
		return nil
	})
	fs.Func("keep-alive", "idle exit after N seconds; -1 never, 0 single-job ([runtime] keep_alive_s)", func(s string) error {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("want a number of seconds: %w", err)
		}
		f.KeepAliveS = &n
		return nil
	})
	return f
}

func strFlag(fs *flag.FlagSet, dst **string, name, usage string) {
	fs.Func(name, usage, func(s string) error {
		*dst = &s
		return nil
	})
}

// Apply lays the flags and environment over a loaded config and checks the
// result. Precedence: flag, then environment, then file, then default.
func (f *Flags) Apply(c *Config, getenv func(string) string) error {
	if f.Queue != nil {
		c.Daemon.Queue = *f.Queue
	} else if q := getenv(QueueEnv); q != "" {
		c.Daemon.Queue = q
	}
	if c.Daemon.Queue == "" {
		c.Daemon.Queue = daemon.DefaultQueue
	}
	override(&c.Server.URL, f.Server)
	override(&c.Server.TokenFile, f.TokenFile)
	if f.CAFile != nil {
		c.Server.CAFile = *f.CAFile
	} else if v := getenv(CAFileEnv); v != "" {
		c.Server.CAFile = v
	}
	override(&c.Runtime.Workdir, f.Workdir)
	override(&c.Runtime.MaxInvocations, f.MaxInvocations)
	override(&c.Runtime.KeepAliveS, f.KeepAliveS)
	override(&c.Log.Format, f.LogFormat)
	if err := c.Validate(); err != nil {
		return fmt.Errorf("daemonconfig: flags: %w", err)
	}
	return nil
}

// override sets *dst to the flag's value when the flag was given.
func override[T any](dst *T, flag *T) {
	if flag != nil {
		*dst = *flag
	}
}
