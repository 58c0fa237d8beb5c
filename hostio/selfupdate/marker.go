package selfupdate

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MarkerEnv tells a binary that an update just executed it: its value is
// a Marker's Encode.
const MarkerEnv = "NYMPH_OTA_UPDATED"

// RolledBackEnv tells a binary that it was put back after an update to
// the version it holds failed.
const RolledBackEnv = "NYMPH_OTA_ROLLED_BACK"

// Marker is what an updating binary tells the binary it executes.
type Marker struct {
	From, To string // the versions updated from and to
	// Previous is the kept binary, NAME.previous beside the executable.
	Previous string
	// Ready is created by the new binary at its first hello; the watchdog
	// waits for it.
	Ready    string
	Deadline time.Time
	// PID is the updating daemon's: the watchdog's parent, whose death it
	// waits for (read before the watchdog started, which may be after the
	// new binary already died).
	PID      int
	Watchdog int // the watchdog's pid, 0 when none was started
}

// Encode is the marker as one environment value (URL query syntax, so a
// path may hold any character).
func (m Marker) Encode() string {
	v := url.Values{}
	v.Set("from", m.From)
	v.Set("to", m.To)
	v.Set("previous", m.Previous)
	v.Set("ready", m.Ready)
	v.Set("deadline", strconv.FormatInt(m.Deadline.Unix(), 10))
	v.Set("pid", strconv.Itoa(m.PID))
	if m.Watchdog > 0 {
		v.Set("watchdog", strconv.Itoa(m.Watchdog))
	}
	return v.Encode()
}

// ParseMarker reads a MarkerEnv value.
func ParseMarker(s string) (Marker, error) {
	v, err := url.ParseQuery(s)
	if err != nil {
		return Marker{}, fmt.Errorf("selfupdate: parse %s: %w", MarkerEnv, err)
	}
	m := Marker{From: v.Get("from"), To: v.Get("to"), Previous: v.Get("previous"), Ready: v.Get("ready")}
	if m.Previous == "" || !strings.HasSuffix(m.Previous, PreviousSuffix) || m.Ready == "" {
		return Marker{}, errors.New("selfupdate: " + MarkerEnv + " names no previous binary or ready file")
	}
	sec, err := strconv.ParseInt(v.Get("deadline"), 10, 64)
	if err != nil {
		return Marker{}, fmt.Errorf("selfupdate: %s deadline: %w", MarkerEnv, err)
	}
	m.Deadline = time.Unix(sec, 0)
	if m.PID, err = strconv.Atoi(v.Get("pid")); err != nil || m.PID <= 0 {
		return Marker{}, fmt.Errorf("selfupdate: %s names no updating pid", MarkerEnv)
	}
	if w := v.Get("watchdog"); w != "" {
		if m.Watchdog, err = strconv.Atoi(w); err != nil {
			return Marker{}, fmt.Errorf("selfupdate: %s watchdog: %w", MarkerEnv, err)
		}
	}
	return m, nil
}

// Executable is the path the update installed over.
func (m Marker) Executable() string { return strings.TrimSuffix(m.Previous, PreviousSuffix) }

// Environ is env without either update variable, plus this marker.
func (m Marker) Environ(env []string) []string {
	return append(Strip(env), MarkerEnv+"="+m.Encode())
}

// Strip is env without MarkerEnv and RolledBackEnv.
func Strip(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k != MarkerEnv && k != RolledBackEnv {
			out = append(out, kv)
		}
	}
	return out
}

// rolledBack is env for the previous binary put back after version failed.
func rolledBack(env []string, version string) []string {
	return append(Strip(env), RolledBackEnv+"="+version)
}
