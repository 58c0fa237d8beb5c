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
// each known key that changes a value is applied at once and logged, the
// retry bounds together once the whole map is in (settleRetryBounds); an
// unknown key is logged and ignored. Nothing happens without the
// extension.
func (m *Machine) applyLiveConfig(now time.Time, config map[string]msgp.Raw, inHello bool) {
	if len(config) == 0 || !m.uses(wire.ExtConfig) {
		return
	}
	retryMinS, retryMaxS := m.cfg.RetryMinS, m.cfg.RetryMaxS
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
	m.settleRetryBounds(retryMinS, retryMaxS)
	// A raised max_invocations frees permits for held work.
	m.released(now)
}

// setLive applies one live value, logging it when it changes anything. A
// retry bound only takes its value: the pair is ordered and logged by
// settleRetryBounds, once every key of the configuration is in.
func (m *Machine) setLive(key string, v wire.LiveValue) {
	var from, to string
	switch key {
	case wire.ConfigWaitMaxS:
		from, to = fmtNum(m.cfg.WaitMaxS), fmtNum(v.Number)
		m.cfg.WaitMaxS = v.Number
	case wire.ConfigRetryMinS:
		m.cfg.RetryMinS = v.Number
	case wire.ConfigRetryMaxS:
		m.cfg.RetryMaxS = v.Number
	case wire.ConfigMaxInvocations:
		from, to = strconv.Itoa(m.cfg.MaxInvocations), strconv.Itoa(int(v.Number))
		m.cfg.MaxInvocations = int(v.Number)
	case wire.ConfigLogLevel:
		from, to = string(cmp.Or(m.logLevel, m.configuredAt.LogLevel, wire.LogInfo)), string(v.Level)
		m.logLevel = v.Level
		if from != to {
			m.emit(SetLogLevel{Level: v.Level})
		}
	}
	m.logApplied(key, from, to)
}

// settleRetryBounds hands the retry bounds of a whole configuration to
// the backoff and logs each one that is not what it was (fromMinS,
// fromMaxS) before it. They are settled as a pair because clamping each
// key as it comes against the other's old value goes wrong whatever the
// order: lowering both, retry_max_s would stop at the old minimum. A plane
// refuses a disordered pair, but its value next to one this daemon takes
// back from its own configuration (a key the plane stopped setting) can
// make one; then retry_max_s is raised to retry_min_s, as New does.
func (m *Machine) settleRetryBounds(fromMinS, fromMaxS float64) {
	if !wire.RetryBoundsOrdered(m.cfg.RetryMinS, m.cfg.RetryMaxS) {
		m.cfg.RetryMaxS = m.cfg.RetryMinS
	}
	if m.cfg.RetryMinS == fromMinS && m.cfg.RetryMaxS == fromMaxS {
		return
	}
	m.backoff.reconfigure(m.cfg.RetryMinS, m.cfg.RetryMaxS)
	// In key order, as setLive's lines come.
	m.logApplied(wire.ConfigRetryMaxS, fmtNum(fromMaxS), fmtNum(m.cfg.RetryMaxS))
	m.logApplied(wire.ConfigRetryMinS, fmtNum(fromMinS), fmtNum(m.cfg.RetryMinS))
}

// logApplied logs a live key whose value in force went from one value to
// another; one that stayed is not news.
func (m *Machine) logApplied(key, from, to string) {
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
		return wire.LiveValue{Level: cmp.Or(b.LogLevel, wire.LogInfo)}
	}
	return wire.LiveValue{}
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
