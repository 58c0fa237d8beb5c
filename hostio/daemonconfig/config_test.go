package daemonconfig

import (
	"flag"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pelletier/go-toml/v2"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		edit    func(*Config)
		unknown []string
		err     string
	}{
		{name: "empty file is the defaults", file: "", edit: func(*Config) {}},
		{
			name: "every section",
			file: `
[server]
url = "https://plane.example"
token_file = "/etc/dreamlake/token"
namespace = "ml"
transport = "fifo"
relay_dir = "/run/relay/m1"
relay_replies = "raw"
spool_interval_ms = 50.0
extensions = false
[daemon]
machine_id = "m1"
label = "gpu box"
tags = ["gpu=a100", "zone=b"]
lanes = ["fast"]
queue = "train*"
[runtime]
max_invocations = 4.0
keep_alive_s = 30
workdir = "/tmp/w"
runners = ["process", "docker"]
default_runner = "docker"
entry = ["/usr/bin/entry", "-v"]
container_entry = ["/opt/venv/bin/python", "-m", "entry"]
auto_update = true
auto_update_check_interval_s = 600
[poll]
wait_max_s = 5
retry_min_s = 0.5
retry_max_s = 30
[shutdown]
grace_s = 10
[introspect]
enabled = true
listen = "127.0.0.1:9999"
[identity]
enabled = true
key_file = "/k"
[log]
format = "json"
level = "debug"
`,
			edit: func(c *Config) {
				c.Server = Server{URL: "https://plane.example", TokenFile: "/etc/dreamlake/token", Namespace: "ml",
					Transport: "fifo", RelayDir: "/run/relay/m1", RelayReplies: "raw", SpoolIntervalMS: 50, Extensions: false}
				c.Daemon = Daemon{MachineID: "m1", Label: "gpu box", Tags: []string{"gpu=a100", "zone=b"}, Lanes: []string{"fast"}, Queue: "train*"}
				c.Runtime = Runtime{MaxInvocations: 4, KeepAliveS: 30, Workdir: "/tmp/w", Runners: []string{"process", "docker"},
					DefaultRunner: "docker", Entry: []string{"/usr/bin/entry", "-v"},
					ContainerEntry: []string{"/opt/venv/bin/python", "-m", "entry"}, AutoUpdate: true, AutoUpdateCheckIntervalS: 600}
				c.Poll = Poll{WaitMaxS: 5, RetryMinS: 0.5, RetryMaxS: 30}
				c.Shutdown.GraceS = 10
				c.Introspect = Introspect{Enabled: true, Listen: "127.0.0.1:9999"}
				c.Identity = Identity{Enabled: true, KeyFile: "/k"}
				c.Log = Log{Format: "json", Level: "debug"}
			},
		},
		{
			name: "tags as a table",
			file: "[daemon]\ntags = { zone = \"b\", gpu = \"a100\", count = 2 }\n",
			edit: func(c *Config) { c.Daemon.Tags = []string{"count=2", "gpu=a100", "zone=b"} },
		},
		{
			name: "tags as a sub-table",
			file: "[daemon.tags]\nzone = \"b\"\n",
			edit: func(c *Config) { c.Daemon.Tags = []string{"zone=b"} },
		},
		{
			name:    "unknown keys are reported by dotted name",
			file:    "colour = 1\n[server]\nurl = \"http://127.0.0.1:1\"\nurll = 2\n[extra]\na = 1\n",
			edit:    func(c *Config) { c.Server.URL = "http://127.0.0.1:1" },
			unknown: []string{"colour", "extra", "server.urll"},
		},
		{name: "string for a number", file: "[runtime]\nmax_invocations = \"4\"\n", err: `runtime.max_invocations must be a whole number, not the string "4"`},
		{name: "fractional integer", file: "[runtime]\nmax_invocations = 4.5\n", err: "runtime.max_invocations must be a whole number"},
		{name: "number for a string", file: "[server]\nurl = 8080\n", err: "server.url must be a string, not the number 8080"},
		{name: "bad list element", file: "[runtime]\nrunners = [\"process\", 3]\n", err: "runtime.runners[1] must be a string"},
		{name: "section not a table", file: "server = \"x\"\n", err: "server must be a table"},
		{name: "bad tag", file: "[daemon]\ntags = [\"novalue\"]\n", err: `daemon.tags: "novalue" is not key=value`},
		{name: "bad transport", file: "[server]\ntransport = \"pigeon\"\n", err: `server.transport = "pigeon"`},
		{name: "fifo needs relay_dir", file: "[server]\ntransport = \"fifo\"\n", err: "server.relay_dir is required"},
		{name: "retry bounds", file: "[poll]\nretry_min_s = 10\nretry_max_s = 5\n", err: "poll.retry_min_s"},
		{
			name: "equal retry bounds",
			file: "[poll]\nretry_min_s = 5\nretry_max_s = 5\n",
			edit: func(c *Config) { c.Poll.RetryMinS, c.Poll.RetryMaxS = 5, 5 },
		},
		{
			// The file's alias is resolved here, once, to the canonical
			// name: the logger and the machine's live log.level then
			// compare one name, so a live "warn" is no change.
			name: "log level alias",
			file: "[log]\nlevel = \"WARNING\"\n",
			edit: func(c *Config) { c.Log.Level = "warn" },
		},
		{
			name: "log level in upper case",
			file: "[log]\nlevel = \"Debug\"\n",
			edit: func(c *Config) { c.Log.Level = "debug" },
		},
		{name: "unknown log level", file: "[log]\nlevel = \"trace\"\n", err: `log.level = "trace": want debug, info, warn or error`},
		{name: "empty container entry", file: "[runtime]\ncontainer_entry = []\n", err: "runtime.container_entry is empty"},
		{name: "keep alive below -1", file: "[runtime]\nkeep_alive_s = -2\n", err: "runtime.keep_alive_s"},
		{name: "syntax error has a position", file: "[server\nurl = 1\n", err: "/etc/x.toml:1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("/etc/x.toml", []byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.err)
				}
				if !strings.Contains(err.Error(), "/etc/x.toml") {
					t.Fatalf("error %q does not name the file", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Defaults()
			tc.edit(&want)
			if diff := cmp.Diff(want, got.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.unknown, got.Unknown); diff != "" {
				t.Errorf("unknown (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadLookupOrder(t *testing.T) {
	files := map[string]string{}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	env := func(k string) string {
		if k == "HOME" {
			return "/home/u"
		}
		return ""
	}
	l := Lookup{SystemPath: "/etc/d.toml", Getenv: env, ReadFile: read}
	home := "/home/u/.config/dreamlake/udf-daemon.toml"

	got, err := Load(l)
	if err != nil || got.Path != "" || got.Config.Daemon.Queue != "default" {
		t.Fatalf("no files: %+v, %v", got, err)
	}
	files[home] = "[daemon]\nlabel = \"home\"\n"
	if got, _ := Load(l); got.Path != home || got.Config.Daemon.Label != "home" {
		t.Fatalf("home file: %+v", got)
	}
	files["/etc/d.toml"] = "[daemon]\nlabel = \"etc\"\n"
	if got, _ := Load(l); got.Path != "/etc/d.toml" || got.Config.Daemon.Label != "etc" {
		t.Fatalf("system file first: %+v", got)
	}
	files["/x.toml"] = "[daemon]\nlabel = \"explicit\"\n"
	l.Explicit = "/x.toml"
	if got, _ := Load(l); got.Path != "/x.toml" || got.Config.Daemon.Label != "explicit" {
		t.Fatalf("--config first: %+v", got)
	}
	l.Explicit = "/missing.toml"
	if _, err := Load(l); err == nil || !strings.Contains(err.Error(), "/missing.toml") {
		t.Fatalf("missing --config file: %v", err)
	}
}

func TestFlagsAndEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  string
		args  []string
		env   map[string]string
		check func(Config) bool
		err   string
	}{
		{name: "queue default", check: func(c Config) bool { return c.Daemon.Queue == "default" }},
		{name: "queue from file", file: "[daemon]\nqueue = \"f\"\n", check: func(c Config) bool { return c.Daemon.Queue == "f" }},
		{name: "queue env beats file", file: "[daemon]\nqueue = \"f\"\n", env: map[string]string{QueueEnv: "e"},
			check: func(c Config) bool { return c.Daemon.Queue == "e" }},
		{name: "queue flag beats env", args: []string{"--queue", "gpu*"}, env: map[string]string{QueueEnv: "e"},
			check: func(c Config) bool { return c.Daemon.Queue == "gpu*" }},
		{name: "server and token", file: "[server]\nurl = \"http://a\"\n", args: []string{"--server", "http://127.0.0.1:9", "--token-file", "/t"},
			check: func(c Config) bool { return c.Server.URL == "http://127.0.0.1:9" && c.Server.TokenFile == "/t" }},
		{name: "ca file from file", file: "[server]\nca_file = \"/f.crt\"\n", check: func(c Config) bool { return c.Server.CAFile == "/f.crt" }},
		{name: "ca file env beats file", file: "[server]\nca_file = \"/f.crt\"\n", env: map[string]string{CAFileEnv: "/e.crt"},
			check: func(c Config) bool { return c.Server.CAFile == "/e.crt" }},
		{name: "ca file flag beats env", args: []string{"--ca-file", "/a.crt"}, env: map[string]string{CAFileEnv: "/e.crt"},
			check: func(c Config) bool { return c.Server.CAFile == "/a.crt" }},
		{name: "runtime", args: []string{"--workdir", "/w", "--max-invocations", "0", "--keep-alive", "0"},
			check: func(c Config) bool {
				return c.Runtime.Workdir == "/w" && c.Runtime.MaxInvocations == 0 && c.Runtime.KeepAliveS == 0
			}},
		{name: "log format", args: []string{"--log-format", "json"}, check: func(c Config) bool { return c.Log.Format == "json" }},
		{name: "bad log format", args: []string{"--log-format", "xml"}, err: "log.format"},
		{name: "bad max", args: []string{"--max-invocations", "many"}, err: "max-invocations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
			fs.SetOutput(new(strings.Builder))
			f := Register(fs)
			err := fs.Parse(tc.args)
			var cfg Config
			if err == nil {
				var l Loaded
				l, err = Parse("/c.toml", []byte(tc.file))
				cfg = l.Config
				if err == nil {
					err = f.Apply(&cfg, func(k string) string { return tc.env[k] })
				}
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Fatalf("unexpected config %+v", cfg)
			}
		})
	}
}

func TestPrintConfigRoundTrips(t *testing.T) {
	c := Defaults()
	c.Daemon.Tags = []string{"a=b"}
	c.Daemon.Lanes = []string{}
	out, err := c.TOML()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("printed", out)
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, out)
	}
	if len(back.Unknown) != 0 {
		t.Fatalf("printed config has unknown keys %v", back.Unknown)
	}
	if diff := cmp.Diff(c, back.Config); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	var generic map[string]any
	if err := toml.Unmarshal(out, &generic); err != nil {
		t.Fatal(err)
	}
}

// A span in seconds that is NaN, infinite or past MaxSeconds is refused,
// naming its key: NaN passes every comparison the other checks make. A
// span of exactly MaxSeconds is a number like any other.
func TestSpansMustBeFiniteAndBounded(t *testing.T) {
	for _, key := range []string{"poll.wait_max_s", "poll.retry_min_s", "poll.retry_max_s",
		"runtime.keep_alive_s", "runtime.auto_update_check_interval_s", "shutdown.grace_s"} {
		section, name, _ := strings.Cut(key, ".")
		for _, v := range []string{"nan", "inf", "-inf", "1000000001"} {
			file := fmt.Sprintf("[%s]\n%s = %s\n", section, name, v)
			if key == "poll.retry_min_s" || key == "poll.retry_max_s" {
				// Keep min <= max true where the value allows it, so only
				// the bound can refuse it.
				file = fmt.Sprintf("[poll]\nretry_min_s = %s\nretry_max_s = %s\n", v, v)
			}
			loaded, err := Parse("t.toml", []byte(file))
			if err == nil {
				err = loaded.Config.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s = %s: err %v, want a refusal naming %s", key, v, err, key)
			}
		}
	}
	loaded, err := Parse("t.toml", []byte("[poll]\nwait_max_s = 1000000000\nretry_max_s = 1000000000\n[shutdown]\ngrace_s = 1e9\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.Config.Validate(); err != nil {
		t.Errorf("spans of exactly MaxSeconds refused: %v", err)
	}
}
