package wire

import "strings"

// LogLevel is a daemon's log level by its canonical name: the value of
// udf-daemon.toml's [log] level and of the live config key log.level
// (ConfigLogLevel). A host maps it to its logger's levels.
type LogLevel string

// The log levels, from the most verbose.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// LogLevels are the canonical level names, from the most verbose.
var LogLevels = [...]LogLevel{LogDebug, LogInfo, LogWarn, LogError}

// logLevelAliases are the other names udf-daemon.toml's [log] level
// accepts. The live config key does not take them: what a plane stores
// and sends is always a canonical name.
var logLevelAliases = map[string]LogLevel{"warning": LogWarn}

// LogLevelChoices lists the canonical names for an error message that
// refuses a level: "debug, info, warn or error".
var LogLevelChoices = func() string {
	names := make([]string, len(LogLevels))
	for i, l := range LogLevels {
		names[i] = string(l)
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}()

// ParseLogLevel returns the level a canonical name names, in any case; ok
// is false for anything else, aliases included (the live config rule).
func ParseLogLevel(name string) (level LogLevel, ok bool) {
	l := LogLevel(strings.ToLower(name))
	for _, known := range LogLevels {
		if l == known {
			return l, true
		}
	}
	return "", false
}

// ParseFileLogLevel is ParseLogLevel that also takes the aliases the
// config file accepts ("warning" is warn), returning the canonical level.
func ParseFileLogLevel(name string) (level LogLevel, ok bool) {
	if l, ok := ParseLogLevel(name); ok {
		return l, true
	}
	l, ok := logLevelAliases[strings.ToLower(name)]
	return l, ok
}
