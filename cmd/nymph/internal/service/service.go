// Package service renders the service definitions `nymph install-service`
// prints: a systemd unit (Linux), a launchd LaunchDaemon property list
// (macOS) or a bash script registering a logon task (Windows, run from
// Git Bash), for the daemon, the relay or serve. It renders text only;
// nothing here installs anything.
package service

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/nymphd/nymph/runners"
)

// Role is the program a definition runs.
type Role string

// The roles.
const (
	Daemon Role = "daemon"
	Relay  Role = "relay"
	Serve  Role = "serve"
)

// The operating systems a definition is rendered for.
const (
	Linux   = "linux"
	Darwin  = "darwin"
	Windows = "windows"
)

// DefaultRelayPairs is the pair count the relay's open-file limit is
// sized for when Spec.RelayPairs is 0.
const DefaultRelayPairs = 10000

// ServeDataDir is serve's --data-dir in a definition whose arguments name
// none.
const ServeDataDir = "/var/lib/nymph/serve"

// RelayEnvFile is the file a relay unit reads its NYMPH_RELAY_* settings
// from when the arguments do not give them.
const RelayEnvFile = "/etc/nymph/relay.env"

// stopMarginS is what a stop may take past the daemon's grace: the
// runners' SIGTERM, a grace, then SIGKILL of what is left, and the last
// results posted to the control plane.
const stopMarginS = 30

// watchdogS is systemd's WatchdogSec: the daemon beats every half of it.
const watchdogS = 60

// Spec is one definition to render.
type Spec struct {
	Role Role
	OS   string
	// Bin is the binary's path on the target host.
	Bin string
	// Config is the daemon's --config ("": the daemon's own lookup).
	Config string
	// GraceS is the daemon's [shutdown] grace_s and GraceFrom where it
	// was read ("" for the built-in default); the stop timeout is sized
	// past it.
	GraceS    float64
	GraceFrom string
	// RelayPairs sizes the relay's open-file limit (0: DefaultRelayPairs).
	RelayPairs int
	// Args are appended to the program's own arguments.
	Args []string
}

// Placeholder is the binary path a definition for another OS than the
// running one gets without --bin: obviously not a path to keep.
func Placeholder(goos string) string {
	if goos == Windows {
		return `C:\path\to\nymph.exe`
	}
	return "/path/to/nymph"
}

// Name is the service's name: the unit's file name without .service, the
// task's name on Windows.
func (s Spec) Name() string { return "nymph-" + string(s.Role) }

// Label is the launchd label.
func (s Spec) Label() string { return "dev.nymph." + string(s.Role) }

// Render renders s for its OS.
func Render(s Spec) ([]byte, error) {
	switch s.Role {
	case Daemon, Relay, Serve:
	default:
		return nil, fmt.Errorf("service: role %q: want daemon, relay or serve", s.Role)
	}
	if s.Bin == "" {
		return nil, fmt.Errorf("service: no binary path")
	}
	if math.IsNaN(s.GraceS) || math.IsInf(s.GraceS, 0) || s.GraceS < 0 {
		return nil, fmt.Errorf("service: grace %v: want a finite number of seconds >= 0", s.GraceS)
	}
	if s.RelayPairs < 0 {
		return nil, fmt.Errorf("service: relay pairs %d: want >= 0", s.RelayPairs)
	}
	switch s.OS {
	case Linux:
		return systemdUnit(s), nil
	case Darwin:
		return launchdPlist(s), nil
	case Windows:
		return logonTaskScript(s), nil
	}
	return nil, fmt.Errorf("service: os %q: want linux, darwin or windows", s.OS)
}

// argv is the program's arguments after the binary.
func (s Spec) argv() []string {
	args := []string{string(s.Role)}
	switch s.Role {
	case Daemon:
		if s.Config != "" {
			args = append(args, "--config", s.Config)
		}
	case Serve:
		if !names(s.Args, "data-dir") {
			args = append(args, "--data-dir", ServeDataDir)
		}
	}
	return append(args, s.Args...)
}

// names reports whether args set the flag name (-name or --name, with or
// without =value).
func names(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// stopTimeoutS is how long a stop may take before what is left is killed.
func (s Spec) stopTimeoutS() int {
	if s.Role != Daemon {
		return stopMarginS
	}
	return int(math.Ceil(s.GraceS)) + stopMarginS
}

// nofile is the relay's open-file limit for its pairs: the README's
// (2 × pairs + 256) × 4/3, rounded up.
func (s Spec) nofile() int {
	pairs := s.RelayPairs
	if pairs == 0 {
		pairs = DefaultRelayPairs
	}
	return ((2*pairs+256)*4 + 2) / 3
}

func (s Spec) graceReason() string {
	from := "the built-in default"
	if s.GraceFrom != "" {
		from = s.GraceFrom
	}
	return fmt.Sprintf("[shutdown] grace_s is %ss (%s), plus %ds for the runners' SIGTERM, then SIGKILL, and the last results to be posted",
		strconv.FormatFloat(s.GraceS, 'f', -1, 64), from, stopMarginS)
}

// ---------------------------------------------------------------- systemd

func systemdUnit(s Spec) []byte {
	var b bytes.Buffer
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line("# nymph %s as a systemd service, printed by `nymph install-service`.", s.Role)
	switch s.Role {
	case Daemon:
		line("# Join first (nymph daemon join --server URL --token T): the daemon runs")
		line("# on the stored credential, so no token is written here.")
	case Relay:
		line("# Settings not on ExecStart come from %s:", RelayEnvFile)
		line("# NYMPH_RELAY_PREFIX, NYMPH_RELAY_UPSTREAM, NYMPH_RELAY_TOKEN_FILE, NYMPH_CA_FILE.")
	}
	line("#   nymph install-service%s | sudo tee /etc/systemd/system/%s.service", roleFlag(s.Role), s.Name())
	line("#   sudo systemctl daemon-reload && sudo systemctl enable --now %s", s.Name())
	line("")
	line("[Unit]")
	line("Description=nymph %s", s.Role)
	line("Wants=network-online.target")
	line("After=network-online.target")
	line("")
	line("[Service]")
	if s.Role == Daemon {
		line("# READY=1 once the first hello is answered and the daemon polls;")
		line("# STOPPING=1 when it drains; WATCHDOG=1 every half WatchdogSec from its")
		line("# loop, so a daemon whose loop is stuck is restarted. Only the daemon")
		line("# itself may notify, never a command it runs.")
		line("Type=notify")
		line("NotifyAccess=main")
		line("WatchdogSec=%ds", watchdogS)
	} else {
		line("# READY=1 once it serves (serve listens; the relay pumps the pairs it")
		line("# found at start); STOPPING=1 when it shuts down.")
		line("Type=notify")
		line("NotifyAccess=main")
	}
	if s.Role == Relay {
		line("EnvironmentFile=-%s", RelayEnvFile)
	}
	line("ExecStart=%s", systemdCommand(append([]string{s.Bin}, s.argv()...)))
	line("Restart=on-failure")
	line("RestartSec=5s")
	if s.Role == Daemon {
		line("# Exit 2: the host's key was revoked or the configuration is refused;")
		line("# starting again would not help.")
		line("RestartPreventExitStatus=2")
	}
	line("# SIGTERM goes to nymph alone, which stops its own children in order;")
	line("# whatever is left at TimeoutStopSec is killed.")
	line("KillMode=mixed")
	if s.Role == Daemon {
		line("# %s.", s.graceReason())
	}
	line("TimeoutStopSec=%ds", s.stopTimeoutS())
	if s.Role == Relay {
		pairs := s.RelayPairs
		if pairs == 0 {
			pairs = DefaultRelayPairs
		}
		line("# Two descriptors a pair, in three quarters of the limit less 256:")
		line("# (2 × pairs + 256) × 4/3 for %d pairs (install-service --pairs N).", pairs)
		line("LimitNOFILE=%d", s.nofile())
	}
	line("")
	line("[Install]")
	line("WantedBy=multi-user.target")
	return b.Bytes()
}

func roleFlag(r Role) string {
	if r == Daemon {
		return ""
	}
	return " --" + string(r)
}

// systemdCommand quotes a command line for ExecStart: "%" and "$" are
// doubled (systemd expands specifiers and variables there), and a word
// with a space, quote or backslash is double-quoted.
func systemdCommand(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		a = strings.ReplaceAll(a, "%", "%%")
		a = strings.ReplaceAll(a, "$", "$$")
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\;") {
			a = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`).Replace(a) + `"`
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// ---------------------------------------------------------------- launchd

func launchdPlist(s Spec) []byte {
	var b bytes.Buffer
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	file := "/Library/LaunchDaemons/" + s.Label() + ".plist"
	line(`<?xml version="1.0" encoding="UTF-8"?>`)
	line(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">`)
	line("<!--")
	line("  nymph %s as a launchd LaunchDaemon, printed by `nymph install-service`.", s.Role)
	if s.Role == Daemon {
		line("  Join first (nymph daemon join): it runs on the stored credential.")
	}
	// No flags here: "--" may not appear in an XML comment.
	line("  Save it as %s, owned by root:wheel,", file)
	line("  then: sudo launchctl load -w %s", file)
	line("  KeepAlive restarts it after a failure only: a clean exit stays stopped.")
	if s.Role == Daemon {
		line("  ExitTimeOut: %s.", s.graceReason())
	}
	line("-->")
	line(`<plist version="1.0">`)
	line("<dict>")
	line("\t<key>Label</key>")
	line("\t<string>%s</string>", xmlText(s.Label()))
	line("\t<key>ProgramArguments</key>")
	line("\t<array>")
	for _, a := range append([]string{s.Bin}, s.argv()...) {
		line("\t\t<string>%s</string>", xmlText(a))
	}
	line("\t</array>")
	line("\t<key>RunAtLoad</key>")
	line("\t<true/>")
	line("\t<key>KeepAlive</key>")
	line("\t<dict>")
	line("\t\t<key>SuccessfulExit</key>")
	line("\t\t<false/>")
	line("\t</dict>")
	line("\t<key>ExitTimeOut</key>")
	line("\t<integer>%d</integer>", s.stopTimeoutS())
	if s.Role == Relay {
		for _, k := range []string{"SoftResourceLimits", "HardResourceLimits"} {
			line("\t<key>%s</key>", k)
			line("\t<dict>")
			line("\t\t<key>NumberOfFiles</key>")
			line("\t\t<integer>%d</integer>", s.nofile())
			line("\t</dict>")
		}
	}
	log := "/var/log/" + s.Name() + ".log"
	line("\t<key>StandardOutPath</key>")
	line("\t<string>%s</string>", log)
	line("\t<key>StandardErrorPath</key>")
	line("\t<string>%s</string>", log)
	line("</dict>")
	line("</plist>")
	return b.Bytes()
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// ---------------------------------------------------------------- windows

// logonTaskScript is a bash script (Git Bash; spec 004: no PowerShell)
// that registers a scheduled task starting nymph at the user's logon, in
// the user's own session, through schtasks and a Task Scheduler XML
// definition.
func logonTaskScript(s Spec) []byte {
	var args []string
	for _, a := range s.argv() {
		args = append(args, windowsArg(a))
	}
	var b bytes.Buffer
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	line("#!/usr/bin/env bash")
	line("# nymph %s as a Windows logon task, printed by `nymph install-service`.", s.Role)
	line("# Run it from Git Bash as the user the task runs as:")
	line("#   nymph install-service --os windows%s --bin 'C:\\Program Files\\nymph\\nymph.exe' > install-%s.sh", roleFlag(s.Role), s.Name())
	line("#   bash install-%s.sh", s.Name())
	if s.Role == Daemon {
		line("# Join first (nymph daemon join): the task runs on the stored credential.")
	}
	line("# Remove it with: schtasks //Delete //TN %s //F", s.Name())
	line("set -euo pipefail")
	line("")
	line("task=%s", runners.ShellQuote(s.Name()))
	line(`user="${USERDOMAIN:-${COMPUTERNAME:-.}}\\${USERNAME:?USERNAME is not set: run this from Git Bash on Windows}"`)
	line(`dir="$(mktemp -d)"`)
	line(`trap 'rm -rf "$dir"' EXIT`)
	line("")
	line("# The definition, with the user filled in below; schtasks wants UTF-16.")
	line("read -r -d '' definition <<'NYMPH_TASK_XML' || true")
	line(`<?xml version="1.0" encoding="UTF-16"?>`)
	line(`<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">`)
	line(`  <RegistrationInfo><Description>nymph %s</Description></RegistrationInfo>`, s.Role)
	line(`  <Triggers><LogonTrigger><Enabled>true</Enabled><UserId>@NYMPH_USER@</UserId></LogonTrigger></Triggers>`)
	line(`  <Principals><Principal id="Author"><UserId>@NYMPH_USER@</UserId><LogonType>InteractiveToken</LogonType><RunLevel>LeastPrivilege</RunLevel></Principal></Principals>`)
	line(`  <Settings>`)
	line(`    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>`)
	line(`    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>`)
	line(`    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>`)
	line(`    <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>`)
	line(`    <RestartOnFailure><Interval>PT1M</Interval><Count>999</Count></RestartOnFailure>`)
	line(`    <Enabled>true</Enabled>`)
	line(`  </Settings>`)
	line(`  <Actions Context="Author"><Exec><Command>%s</Command><Arguments>%s</Arguments></Exec></Actions>`,
		xmlText(s.Bin), xmlText(strings.Join(args, " ")))
	line(`</Task>`)
	line("NYMPH_TASK_XML")
	line("")
	// Quoted replacements: bash 5.2 reads an unquoted "&" there as the match.
	line(`esc=${user//&/"&amp;"}; esc=${esc//</"&lt;"}; esc=${esc//>/"&gt;"}`)
	line(`definition=${definition//@NYMPH_USER@/"$esc"}`)
	line(`{ printf '\xff\xfe'; printf '%%s\n' "$definition" | iconv -f UTF-8 -t UTF-16LE; } > "$dir/task.xml"`)
	line(`MSYS_NO_PATHCONV=1 schtasks /Create /F /TN "$task" /XML "$(cygpath -w "$dir/task.xml")"`)
	line(`echo "registered the logon task $task for $user; start it now with: schtasks //Run //TN $task"`)
	return b.Bytes()
}

// windowsArg quotes one argument for a Windows command line (the rules
// CommandLineToArgvW reads back).
func windowsArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\"") {
		return a
	}
	var b strings.Builder
	b.WriteByte('"')
	slashes := 0
	for _, c := range a {
		switch c {
		case '\\':
			slashes++
			continue
		case '"':
			b.WriteString(strings.Repeat(`\`, 2*slashes+1))
		default:
			b.WriteString(strings.Repeat(`\`, slashes))
		}
		slashes = 0
		b.WriteRune(c)
	}
	b.WriteString(strings.Repeat(`\`, 2*slashes))
	b.WriteByte('"')
	return b.String()
}
