package daemon

import (
	"cmp"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// applyLiveConfig takes the plane's live configuration (extension
// wire.ExtConfig) from a hello reply's config map (inHello: its other
// keys, such as the extensions, are not configuration) or a poll reply:
// each known key that changes a value is applied at once and logged; an
// unknown key is logged and ignored. Nothing happens without the
// extension.
func (m *Machine) applyLiveConfig(now time.Time, config map[string]msgp.Raw, inHello bool) {
	if len(config) == 0 || !m.uses(wire.ExtConfig) {
		return
	}
	if _, whole := config[wire.ConfigGeneration]; whole {
		// The plane sent its whole live configuration: a key it no longer
		// names goes back to this daemon's own value.
		for _, k := range wire.LiveConfigKeys {
			if _, ok := config[k]; !ok {
				m.setLive(k, m.configured(k))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(config)) {
		if k == wire.ConfigGeneration || inHello && k == wire.ConfigExtensions {
			continue
		}
		v, err := wire.DecodeLiveConfig(k, config[k])
		switch {
		case errors.Is(err, wire.ErrUnknownLiveKey):
			m.log(slog.LevelWarn, "live config key unknown to this daemon; ignored", slog.String("key", k))
		case err != nil:
			m.log(slog.LevelWarn, "live config value refused", slog.String("key", k), slog.String("err", err.Error()))
		default:
			m.setLive(k, v)
		}
	}
	// A raised max_invocations frees permits for held work.
	m.released(now)
}

// setLive applies one live value, logging it when it changes anything.
func (m *Machine) setLive(key string, v wire.LiveValue) {
	var from, to string
	switch key {
	case wire.ConfigWaitMaxS:
		from, to = fmtNum(m.cfg.WaitMaxS), fmtNum(v.Number)
		m.cfg.WaitMaxS = v.Number
	case wire.ConfigRetryMinS:
		from, to = fmtNum(m.cfg.RetryMinS), fmtNum(v.Number)
		m.cfg.RetryMinS = v.Number
		m.cfg.RetryMaxS = max(m.cfg.RetryMaxS, v.Number)
		m.backoff.reconfigure(m.cfg.RetryMinS, m.cfg.RetryMaxS)
	case wire.ConfigRetryMaxS:
		from, to = fmtNum(m.cfg.RetryMaxS), fmtNum(v.Number)
		m.cfg.RetryMaxS = max(v.Number, m.cfg.RetryMinS)
		m.backoff.reconfigure(m.cfg.RetryMinS, m.cfg.RetryMaxS)
	case wire.ConfigMaxInvocations:
		from, to = strconv.Itoa(m.cfg.MaxInvocations), strconv.Itoa(int(v.Number))
		m.cfg.MaxInvocations = int(v.Number)
	case wire.ConfigLogLevel:
		from, to = cmp.Or(m.logLevel, m.configuredAt.LogLevel, "info"), v.Level
		m.logLevel = v.Level
		if from != to {
			m.emit(SetLogLevel{Level: v.Level})
		}
	}
	if from != to {
		m.log(slog.LevelInfo, "live config applied", slog.String("key", key), slog.String("from", from), slog.String("to", to))
	}
}

// configured is key's value as the daemon was configured at boot.
func (m *Machine) configured(key string) wire.LiveValue {
	b := m.configuredAt
	switch key {
	case wire.ConfigWaitMaxS:
		return wire.LiveValue{Number: b.WaitMaxS}
	case wire.ConfigRetryMinS:
		return wire.LiveValue{Number: b.RetryMinS}
	case wire.ConfigRetryMaxS:
		return wire.LiveValue{Number: b.RetryMaxS}
	case wire.ConfigMaxInvocations:
		return wire.LiveValue{Number: float64(b.MaxInvocations)}
	case wire.ConfigLogLevel:
		return wire.LiveValue{Level: cmp.Or(b.LogLevel, "info")}
	}
	return wire.LiveValue{}
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
