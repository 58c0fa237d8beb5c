package wire

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tinylib/msgp/msgp"
)

// Live configuration (extension ExtConfig): the keys a control plane may
// set on a running daemon, in the hello reply's config map and, when they
// change, in a poll reply's PollResponse.Config. A daemon applies them
// without a restart, logs each change, and ignores (with a warning) a key
// it does not know. The names are udf-daemon.toml's.
const (
	ConfigWaitMaxS       = "poll.wait_max_s"         // number of seconds > 0
	ConfigRetryMinS      = "poll.retry_min_s"        // number of seconds > 0
	ConfigRetryMaxS      = "poll.retry_max_s"        // number of seconds > 0
	ConfigMaxInvocations = "runtime.max_invocations" // integer >= 0 (0: unbounded)
	ConfigLogLevel       = "log.level"               // a LogLevel's canonical name
)

// ConfigGeneration is the key, always present in a live configuration the
// plane sends, that counts its changes (an unsigned integer). It keeps the
// map from being empty, so removing the last key still reaches the daemon:
// every live key missing from the map goes back to the daemon's own
// configured value.
const ConfigGeneration = "nymph_config_gen"

// LiveConfigKeys are the keys ParseLiveConfig accepts, sorted.
var LiveConfigKeys = [...]string{ConfigLogLevel, ConfigWaitMaxS, ConfigRetryMaxS, ConfigRetryMinS, ConfigMaxInvocations}

// MaxLiveConfigSeconds bounds a number of seconds a plane may set: a day.
const MaxLiveConfigSeconds = 86400

// RetryBoundsOrdered reports whether poll.retry_min_s (ConfigRetryMinS)
// and poll.retry_max_s (ConfigRetryMaxS) make a backoff: it starts at the
// minimum and doubles up to the maximum, so a minimum over the maximum
// would cap the backoff below its first wait. A plane refuses a live configuration that breaks it, a
// daemon a config file that does. Each value's own range is checked apart
// (ParseLiveConfig, the config file's validation), so a NaN passes here
// rather than being refused twice.
func RetryBoundsOrdered(minS, maxS float64) bool {
	return !(minS > maxS)
}

// LiveValue is one live configuration value: a number or a level.
type LiveValue struct {
	Number float64
	Level  LogLevel
}

// ParseLiveConfig checks an operator's key=value and returns the value it
// means; an unknown key or a value out of range is an error naming it.
func ParseLiveConfig(key, value string) (LiveValue, error) {
	switch key {
	case ConfigWaitMaxS, ConfigRetryMinS, ConfigRetryMaxS:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(f) || f <= 0 || f > MaxLiveConfigSeconds {
			return LiveValue{}, fmt.Errorf("%s = %q: want a number of seconds in (0, %d]", key, value, MaxLiveConfigSeconds)
		}
		return LiveValue{Number: f}, nil
	case ConfigMaxInvocations:
		n, err := strconv.ParseInt(value, 10, 32)
		if err != nil || n < 0 {
			return LiveValue{}, fmt.Errorf("%s = %q: want a whole number >= 0 (0 is unbounded)", key, value)
		}
		return LiveValue{Number: float64(n)}, nil
	case ConfigLogLevel:
		l, ok := ParseLogLevel(value)
		if !ok {
			return LiveValue{}, fmt.Errorf("%s = %q: want %s", key, value, LogLevelChoices)
		}
		return LiveValue{Level: l}, nil
	}
	return LiveValue{}, fmt.Errorf("unknown live config key %q: want one of %s", key, strings.Join(LiveConfigKeys[:], ", "))
}

// EncodeLiveConfig is the wire form of key's value: a level as a string,
// max_invocations as an integer, seconds as a float64 (an integer when
// whole, so a strictly typed reader of either kind takes it).
func EncodeLiveConfig(key string, v LiveValue) msgp.Raw {
	switch {
	case key == ConfigLogLevel:
		return msgp.AppendString(nil, string(v.Level))
	case key == ConfigMaxInvocations || v.Number == math.Trunc(v.Number):
		return msgp.AppendInt64(nil, int64(v.Number))
	}
	return msgp.AppendFloat64(nil, v.Number)
}

// DecodeLiveConfig reads a live config value off the wire, leniently (an
// int or a float for numbers); an unknown key is ErrUnknownLiveKey.
func DecodeLiveConfig(key string, raw msgp.Raw) (LiveValue, error) {
	switch key {
	case ConfigLogLevel:
		s, _, err := msgp.ReadStringBytes(raw)
		if err != nil {
			return LiveValue{}, fmt.Errorf("%s: %w", key, err)
		}
		return ParseLiveConfig(key, s)
	case ConfigWaitMaxS, ConfigRetryMinS, ConfigRetryMaxS, ConfigMaxInvocations:
		var n Number
		if _, err := n.UnmarshalMsg(raw); err != nil {
			return LiveValue{}, fmt.Errorf("%s: %w", key, err)
		}
		return ParseLiveConfig(key, strconv.FormatFloat(float64(n), 'f', -1, 64))
	}
	return LiveValue{}, fmt.Errorf("%w: %q", ErrUnknownLiveKey, key)
}

// ErrUnknownLiveKey is a live config key this build does not know.
var ErrUnknownLiveKey = errors.New("unknown live config key")
