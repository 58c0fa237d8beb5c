package daemonconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzParse feeds the config loader arbitrary file bytes: TOML parsing,
// the typed decoding over the defaults and validation. A config file is
// written by whoever installs the daemon, but it is also what
// --print-config prints and a new version reads back, so beyond never
// panicking, a file that parses must print as a file that parses to the
// same config, with no unknown keys.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"[server]\nurl = \"https://plane.example\"\ntransport = \"fifo\"\nrelay_dir = \"/run/relay\"\nspool_interval_ms = 50.0\n",
		"[daemon]\nmachine_id = \"m1\"\nlabel = \"gpu box\"\ntags = [\"gpu=a100\", \"zone=b\"]\nlanes = [\"fast\"]\nqueue = \"train*\"\n",
		"[daemon]\ntags = { gpu = \"a100\" }\n",
		"[runtime]\nmax_invocations = 4.0\nkeep_alive_s = -1\nrunners = [\"process\", \"docker\"]\nentry = [\"python3\"]\n",
		"[poll]\nwait_max_s = 20\nretry_min_s = 0.1\nretry_max_s = 0.5\n",
		"[poll]\nretry_min_s = nan\nwait_max_s = inf\n",
		"[log]\nformat = \"json\"\nlevel = \"WARNING\"\n",
		"[identity]\nenabled = true\nkey_file = \"/etc/key\"\n[unknown]\nx = 1\n",
		"[server\nurl = ",
		"runtime = 5\n",
		"[runtime]\nmax_invocations = 1e300\n",
		"[[daemon]]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		loaded, err := Parse("fuzz.toml", data)
		if err != nil {
			return
		}
		printed, err := loaded.Config.TOML()
		if err != nil {
			t.Fatalf("a config that parsed does not print: %v", err)
		}
		back, err := Parse("printed.toml", printed)
		if err != nil {
			t.Fatalf("the printed config does not parse: %v\n%s", err, printed)
		}
		if len(back.Unknown) != 0 {
			t.Fatalf("the printed config has unknown keys %v\n%s", back.Unknown, printed)
		}
		if diff := cmp.Diff(loaded.Config, back.Config, cmpopts.EquateEmpty(), cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("print and parse again changed the config (-parsed +reparsed):\n%s\n%s", diff, printed)
		}
	})
}
