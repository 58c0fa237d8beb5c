package wire_test

import (
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

// The level names are one set: the live config key takes the canonical
// names in any case, the config file also its aliases, and both answer
// with the canonical name.
func TestLogLevelNames(t *testing.T) {
	for _, tc := range []struct {
		name       string
		live, file wire.LogLevel // "": refused
	}{
		{"debug", wire.LogDebug, wire.LogDebug},
		{"INFO", wire.LogInfo, wire.LogInfo},
		{"warn", wire.LogWarn, wire.LogWarn},
		{"Error", wire.LogError, wire.LogError},
		{"warning", "", wire.LogWarn},
		{"WARNING", "", wire.LogWarn},
		{"trace", "", ""},
		{"", "", ""},
		{" info", "", ""},
	} {
		live, ok := wire.ParseLogLevel(tc.name)
		if live != tc.live || ok != (tc.live != "") {
			t.Errorf("ParseLogLevel(%q) = %q, %v; want %q", tc.name, live, ok, tc.live)
		}
		file, ok := wire.ParseFileLogLevel(tc.name)
		if file != tc.file || ok != (tc.file != "") {
			t.Errorf("ParseFileLogLevel(%q) = %q, %v; want %q", tc.name, file, ok, tc.file)
		}
		v, err := wire.ParseLiveConfig(wire.ConfigLogLevel, tc.name)
		if tc.live == "" {
			if err == nil || !strings.Contains(err.Error(), wire.LogLevelChoices) {
				t.Errorf("ParseLiveConfig(log.level, %q) = %v, %v; want a refusal naming %s", tc.name, v, err, wire.LogLevelChoices)
			}
		} else if err != nil || v.Level != tc.live {
			t.Errorf("ParseLiveConfig(log.level, %q) = %v, %v; want level %q", tc.name, v, err, tc.live)
		}
	}
	if want := "debug, info, warn or error"; wire.LogLevelChoices != want {
		t.Errorf("LogLevelChoices = %q, want %q", wire.LogLevelChoices, want)
	}
	for _, l := range wire.LogLevels {
		if got, ok := wire.ParseLogLevel(string(l)); !ok || got != l {
			t.Errorf("ParseLogLevel(%q) = %q, %v: a canonical name must parse as itself", l, got, ok)
		}
	}
}
