package service

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"howett.net/plist"
)

// fakeBin is an executable file: systemd-analyze verify checks that
// ExecStart's binary exists.
func fakeBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nymph bin", "nymph")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func render(t *testing.T, s Spec) string {
	t.Helper()
	out, err := Render(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// directives are the unit's KEY=VALUE lines, comments left out.
func directives(unit string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(unit, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			m[k] = v
		}
	}
	return m
}

func TestSystemdDaemonUnit(t *testing.T) {
	bin := fakeBin(t)
	unit := render(t, Spec{Role: Daemon, OS: Linux, Bin: bin, Config: "/etc/nymph/udf-daemon.toml", GraceS: 120.5, GraceFrom: "/etc/nymph/udf-daemon.toml"})
	d := directives(unit)
	want := map[string]string{
		"Type": "notify", "NotifyAccess": "main", "WatchdogSec": "60s", "KillMode": "mixed",
		"Restart": "on-failure", "TimeoutStopSec": "151s", "RestartPreventExitStatus": "2",
		"ExecStart": `"` + bin + `" daemon --config /etc/nymph/udf-daemon.toml`,
	}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("%s=%q, want %q", k, d[k], v)
		}
	}
	if !strings.Contains(unit, "# [shutdown] grace_s is 120.5s (/etc/nymph/udf-daemon.toml), plus 30s") {
		t.Errorf("the stop timeout's reason is not in the unit:\n%s", unit)
	}
	if strings.Contains(unit, "token") && strings.Contains(d["ExecStart"], "token") {
		t.Errorf("a token on the command line: %s", d["ExecStart"])
	}
	verify(t, unit, "nymph-daemon.service")
}

func TestSystemdRelayAndServeUnits(t *testing.T) {
	bin := fakeBin(t)
	relay := render(t, Spec{Role: Relay, OS: Linux, Bin: bin, Args: []string{"--status-listen", "127.0.0.1:9090"}})
	d := directives(relay)
	// (2 × 10000 + 256) × 4/3 = 27008: the README's 27,000.
	if d["LimitNOFILE"] != "27008" || d["Type"] != "notify" || d["NotifyAccess"] != "main" || d["EnvironmentFile"] != "-"+RelayEnvFile {
		t.Errorf("relay unit:\n%s", relay)
	}
	if !strings.HasSuffix(d["ExecStart"], " relay --status-listen 127.0.0.1:9090") {
		t.Errorf("relay ExecStart %q", d["ExecStart"])
	}
	if got := directives(render(t, Spec{Role: Relay, OS: Linux, Bin: bin, RelayPairs: 100}))["LimitNOFILE"]; got != "608" {
		t.Errorf("LimitNOFILE for 100 pairs %s, want 608", got)
	}
	verify(t, relay, "nymph-relay.service")

	serve := render(t, Spec{Role: Serve, OS: Linux, Bin: bin})
	if got := directives(serve)["ExecStart"]; !strings.HasSuffix(got, " serve --data-dir "+ServeDataDir) {
		t.Errorf("serve ExecStart %q", got)
	}
	if got := directives(render(t, Spec{Role: Serve, OS: Linux, Bin: bin, Args: []string{"--data-dir=/srv/n"}}))["ExecStart"]; strings.Contains(got, ServeDataDir) {
		t.Errorf("serve ExecStart %q has a second --data-dir", got)
	}
	verify(t, serve, "nymph-serve.service")
}

func TestSystemdCommandQuoting(t *testing.T) {
	got := systemdCommand([]string{"/opt/my nymph/nymph", "daemon", "--label", `a"b\c`, "100%", "$HOME", ""})
	want := `"/opt/my nymph/nymph" daemon --label "a\"b\\c" 100%% $$HOME ""`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// verify runs systemd-analyze verify on the unit, saved under name.
func verify(t *testing.T, unit, name string) {
	t.Helper()
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", p).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte(name)) {
		t.Fatalf("systemd-analyze verify %s: %v\n%s\nunit:\n%s", name, err, out, unit)
	}
}

// launchdJob is the part of a LaunchDaemon the definitions set.
type launchdJob struct {
	Label            string
	ProgramArguments []string
	RunAtLoad        bool
	KeepAlive        struct{ SuccessfulExit *bool }
	ExitTimeOut      int
	SoftLimits       map[string]int `plist:"SoftResourceLimits"`
	HardLimits       map[string]int `plist:"HardResourceLimits"`
}

func parsePlist(t *testing.T, doc string) launchdJob {
	t.Helper()
	var job launchdJob
	format, err := plist.Unmarshal([]byte(doc), &job)
	if err != nil {
		t.Fatalf("plist: %v\n%s", err, doc)
	}
	if format != plist.XMLFormat {
		t.Fatalf("plist format %d, want XML", format)
	}
	if strings.Contains(between(doc, "<!--", "-->"), "--") {
		t.Errorf("a comment holds \"--\", which XML forbids")
	}
	// The document is also well-formed XML with the plist DOCTYPE.
	dec := xml.NewDecoder(strings.NewReader(doc))
	var doctype string
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if d, ok := tok.(xml.Directive); ok {
			doctype = string(d)
		}
	}
	if !strings.Contains(doctype, `"-//Apple//DTD PLIST 1.0//EN"`) {
		t.Errorf("DOCTYPE %q", doctype)
	}
	return job
}

func TestLaunchdPlist(t *testing.T) {
	doc := render(t, Spec{Role: Daemon, OS: Darwin, Bin: "/usr/local/bin/nymph & co", Config: "/etc/n.toml", GraceS: 60})
	job := parsePlist(t, doc)
	if job.Label != "dev.nymph.daemon" || !job.RunAtLoad || job.KeepAlive.SuccessfulExit == nil || *job.KeepAlive.SuccessfulExit || job.ExitTimeOut != 90 {
		t.Errorf("job %+v\n%s", job, doc)
	}
	if want := []string{"/usr/local/bin/nymph & co", "daemon", "--config", "/etc/n.toml"}; strings.Join(job.ProgramArguments, "|") != strings.Join(want, "|") {
		t.Errorf("ProgramArguments %q, want %q", job.ProgramArguments, want)
	}

	relay := parsePlist(t, render(t, Spec{Role: Relay, OS: Darwin, Bin: Placeholder(Darwin)}))
	if relay.Label != "dev.nymph.relay" || relay.SoftLimits["NumberOfFiles"] != 27008 || relay.HardLimits["NumberOfFiles"] != 27008 {
		t.Errorf("relay job %+v", relay)
	}
}

func TestWindowsLogonTaskScript(t *testing.T) {
	script := render(t, Spec{Role: Daemon, OS: Windows, Bin: `C:\Program Files\nymph\nymph.exe`, Args: []string{"--label", "a b"}})
	for _, want := range []string{
		"#!/usr/bin/env bash",
		"<LogonTrigger>",
		`<Command>C:\Program Files\nymph\nymph.exe</Command>`,
		`<Arguments>daemon --label &#34;a b&#34;</Arguments>`,
		"schtasks /Create /F /TN",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q:\n%s", want, script)
		}
	}
	runScript(t, script)
	// The task XML between the heredoc markers parses.
	_, rest, _ := strings.Cut(script, "<<'NYMPH_TASK_XML' || true\n")
	body, _, _ := strings.Cut(rest, "\nNYMPH_TASK_XML\n")
	body = strings.Replace(body, `encoding="UTF-16"`, `encoding="UTF-8"`, 1)
	var task struct {
		Command   string `xml:"Actions>Exec>Command"`
		Arguments string `xml:"Actions>Exec>Arguments"`
	}
	if err := xml.Unmarshal([]byte(body), &task); err != nil || task.Arguments != `daemon --label "a b"` {
		t.Errorf("task XML: %v %+v\n%s", err, task, body)
	}
}

func TestWindowsArg(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "": `""`, "a b": `"a b"`, `a"b`: `"a\"b"`, `C:\dir with\`: `"C:\dir with\\"`, `a\\"b`: `"a\\\\\"b"`,
	} {
		if got := windowsArg(in); got != want {
			t.Errorf("windowsArg(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRenderRefuses(t *testing.T) {
	for name, s := range map[string]Spec{
		"role":  {Role: "agent", OS: Linux, Bin: "/b"},
		"os":    {Role: Daemon, OS: "plan9", Bin: "/b"},
		"bin":   {Role: Daemon, OS: Linux},
		"grace": {Role: Daemon, OS: Linux, Bin: "/b", GraceS: -1},
	} {
		if _, err := Render(s); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
	if Placeholder(Windows) == Placeholder(Linux) || !strings.Contains(Placeholder(Linux), "/path/to/") {
		t.Error("placeholders")
	}
}

// between is the text of s after the first start up to the next end.
func between(s, start, end string) string {
	_, rest, _ := strings.Cut(s, start)
	in, _, _ := strings.Cut(rest, end)
	return in
}

// runScript runs the Windows script under bash with stand-ins for
// schtasks (which prints the XML it is handed, back from UTF-16) and
// cygpath, and checks the definition it registers.
func runScript(t *testing.T, script string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Log("bash not installed: the script is not run")
		return
	}
	if _, err := exec.LookPath("iconv"); err != nil {
		t.Log("iconv not installed: the script is not run")
		return
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"schtasks": "#!/bin/bash\necho \"schtasks $*\"\niconv -f UTF-16 -t UTF-8 \"${@: -1}\"\n",
		"cygpath":  "#!/bin/sh\necho \"$2\"\n",
		"run.sh":   script,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bash, filepath.Join(dir, "run.sh"))
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "USERNAME=bob<&>", "USERDOMAIN=CORP", "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	text := string(out)
	_, xmlDoc, _ := strings.Cut(text, "\n")
	xmlDoc, _, _ = strings.Cut(xmlDoc, "\nregistered ")
	var task struct {
		User    string `xml:"Triggers>LogonTrigger>UserId"`
		Command string `xml:"Actions>Exec>Command"`
	}
	dec := xml.NewDecoder(strings.NewReader(xmlDoc))
	dec.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
	if err := dec.Decode(&task); err != nil || task.User != `CORP\bob<&>` {
		t.Errorf("registered %+v (%v) from:\n%s", task, err, text)
	}
	if !strings.HasPrefix(text, "schtasks /Create /F /TN nymph-") {
		t.Errorf("schtasks was called as %q", strings.SplitN(text, "\n", 2)[0])
	}
}
