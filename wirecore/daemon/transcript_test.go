package daemon

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// Transcript tests: each testdata/*.txt file is a conversation with the
// machine, written the way spec 003 tells the story. A block is
//
//	command arg key=value …
//	optional body lines (poll commands)
//	----
//	expected effects, one per line
//	<blank line>
//
// Lines starting with # between blocks are comments. The harness plays the
// driver: it keeps a fake clock and the armed timers (so `tick` fires what
// is due, in order), remembers the parked poll's Seq and the posts that
// wait for an answer. `go test -run Transcript -rewrite` rewrites the
// expectations; review the diff against the spec before keeping it.

var rewrite = flag.Bool("rewrite", false, "rewrite transcript expectations in testdata")

// epoch is the fake clock's start: 2026-01-01T00:00:00Z.
var epoch = time.Unix(1767225600, 0).UTC()

func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runTranscript(t, f)
		})
	}
}

type block struct {
	line     int
	cmd      string
	body     []string
	expected string
	comments []string // comment and blank lines before the block, kept on rewrite
}

func parseTranscript(t *testing.T, path string) ([]block, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []block
	var pending []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pending = append(pending, l)
			continue
		}
		b := block{line: i + 1, cmd: l, comments: pending}
		pending = nil
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			b.body = append(b.body, lines[i])
		}
		if i >= len(lines) {
			t.Fatalf("%s:%d: block without ----", path, b.line)
		}
		var out []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		b.expected = strings.Join(out, "\n")
		blocks = append(blocks, b)
	}
	return blocks, pending
}

func runTranscript(t *testing.T, path string) {
	blocks, trailer := parseTranscript(t, path)
	h := newHarness()
	var rewritten strings.Builder
	for _, b := range blocks {
		got, err := h.do(b)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", path, b.line, b.cmd, err)
		}
		if *rewrite {
			for _, c := range b.comments {
				rewritten.WriteString(c + "\n")
			}
			rewritten.WriteString(b.cmd + "\n")
			for _, l := range b.body {
				rewritten.WriteString(l + "\n")
			}
			rewritten.WriteString("----\n")
			if got != "" {
				rewritten.WriteString(got + "\n")
			}
			rewritten.WriteString("\n")
			continue
		}
		if got != b.expected {
			t.Errorf("%s:%d: %s\n--- got\n%s\n--- want\n%s", path, b.line, b.cmd, got, b.expected)
		}
	}
	if *rewrite {
		for _, c := range trailer {
			rewritten.WriteString(c + "\n")
		}
		out := strings.TrimRight(rewritten.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fixedJitter makes backoff waits exact for transcripts that check them by
// hand; Uint64 still comes from a seeded generator.
type fixedJitter struct {
	f float64
	*rand.Rand
}

func (r fixedJitter) Float64() float64 { return r.f }

type harness struct {
	cfg    Config
	rnd    Rand
	m      *Machine
	now    time.Time
	timers map[TimerID]time.Time
	parked uint64
	sent   []uint64 // every poll Seq sent, in order
	posts  []Event  // answers owed for PostAck / PostExecResult, in order
}

func newHarness() *harness {
	cfg := DefaultConfig()
	cfg.Hostname = "host-1"
	cfg.MachineID = "auto"
	cfg.Workdir = "/var/lib/nymph"
	cfg.DaemonVersion = "0.3.0"
	return &harness{
		cfg:    cfg,
		rnd:    rand.New(rand.NewPCG(1, 2)),
		now:    epoch,
		timers: map[TimerID]time.Time{},
	}
}

func (h *harness) machine() (*Machine, error) {
	if h.m == nil {
		h.m = New(h.cfg, h.rnd)
	}
	return h.m, nil
}

func (h *harness) do(b block) (string, error) {
	name, pos, kv, err := parseArgs(b.cmd)
	if err != nil {
		return "", err
	}
	if name == "config" {
		return "", h.configure(kv)
	}
	m, _ := h.machine()
	var evs []Event
	switch name {
	case "boot":
		evs = append(evs, Boot{})
	case "hello-ok":
		resp := &wire.HelloResponse{}
		if id, ok := kv["worker_id"]; ok {
			resp.WorkerID = &id
		}
		if code, ok := kv["reject"]; ok {
			resp.Reject = &wire.Reject{Code: code, Message: kv["message"]}
		}
		evs = append(evs, HelloResult{Status: 200, Response: resp})
	case "hello-fail":
		evs = append(evs, failure(kv, func(status int, body []byte, err error) Event {
			return HelloResult{Status: status, Body: body, Err: err}
		}))
	case "poll-ok":
		seq, err := h.seq(kv)
		if err != nil {
			return "", err
		}
		cmds, err := pollCommands(b.body, h.now)
		if err != nil {
			return "", err
		}
		evs = append(evs, PollResult{Seq: seq, Status: 200, Response: &wire.PollResponse{Commands: cmds}})
	case "poll-fail":
		seq, err := h.seq(kv)
		if err != nil {
			return "", err
		}
		evs = append(evs, failure(kv, func(status int, body []byte, err error) Event {
			return PollResult{Seq: seq, Status: status, Body: body, Err: err}
		}))
	case "exec-done":
		code, _ := strconv.Atoi(kv["exit"])
		evs = append(evs, ExecFinished{ExecID: pos[0], Result: wire.ExecResult{ExitCode: wire.Int(code), Stdout: kv["stdout"], DurationMS: 3}})
	case "run-done":
		ev := RunFinished{InvocationID: pos[0], State: kv["state"], ResultBlob: []byte(kv["blob"])}
		if e, ok := kv["error"]; ok {
			typ, msg, _ := strings.Cut(e, ":")
			ev.Error = &wire.ErrorInfo{TypeName: typ, Message: msg}
		}
		evs = append(evs, ev)
	case "setup-done":
		code, _ := strconv.Atoi(kv["exit"])
		ev := SetupFinished{CommandID: pos[0], ExitCode: code, Killed: slices.Contains(pos, "killed")}
		if e, ok := kv["err"]; ok {
			ev.Err = errors.New(e)
		}
		evs = append(evs, ev)
	case "caps":
		ev := CapabilitiesRefreshed{CommandID: pos[0], Capabilities: wire.Capabilities{
			Runners: strings.Split(kv["runners"], ","), MaxInvocations: wire.Int(h.cfg.MaxInvocations), Workdir: h.cfg.Workdir}}
		if e, ok := kv["err"]; ok {
			ev.Err = errors.New(e)
		}
		evs = append(evs, ev)
	case "signal":
		evs = append(evs, Signal{Kind: SignalKind(pos[0])})
	case "posts-ok":
		evs, h.posts = h.posts, nil
	case "post-fail":
		if len(h.posts) == 0 {
			return "", errors.New("no post pending")
		}
		status := 0 // no answer at all
		if v, ok := kv["status"]; ok {
			var err error
			if status, err = strconv.Atoi(v); err != nil {
				return "", fmt.Errorf("post-fail status=%q: %w", v, err)
			}
		}
		switch p := h.posts[0].(type) {
		case AckPosted:
			p.Status, p.Err = status, errors.New(kv["err"])
			evs = append(evs, p)
		case ResultPosted:
			p.Status, p.Err = status, errors.New(kv["err"])
			evs = append(evs, p)
		}
		h.posts = h.posts[1:]
	case "tick":
		d, err := time.ParseDuration(strings.TrimPrefix(pos[0], "+"))
		if err != nil {
			return "", err
		}
		return h.tick(m, d), nil
	case "fire":
		// A timer event the driver delivers late, after a re-arm or cancel.
		at, err := time.ParseDuration(kv["at"])
		if err != nil {
			return "", err
		}
		evs = append(evs, TimerFired{ID: TimerID(pos[0]), At: epoch.Add(at)})
	case "status":
		return renderStatus(m.Status(), h.now), nil
	default:
		return "", fmt.Errorf("unknown command %q", name)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, h.step(m, ev)...)
	}
	return strings.Join(out, "\n"), nil
}

// tick advances the clock by d, firing every timer that falls due on the
// way, earliest first, at its own time.
func (h *harness) tick(m *Machine, d time.Duration) string {
	end := h.now.Add(d)
	var out []string
	for {
		id, at, ok := h.nextTimer(end)
		if !ok {
			break
		}
		h.now = at
		delete(h.timers, id)
		out = append(out, fmt.Sprintf("~ %s fires at +%s", id, at.Sub(epoch)))
		out = append(out, h.step(m, TimerFired{ID: id, At: at})...)
	}
	h.now = end
	return strings.Join(out, "\n")
}

func (h *harness) nextTimer(end time.Time) (TimerID, time.Time, bool) {
	var ids []TimerID
	for id, at := range h.timers {
		if !at.After(end) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", time.Time{}, false
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := h.timers[ids[i]], h.timers[ids[j]]
		return a.Before(b) || a.Equal(b) && ids[i] < ids[j]
	})
	return ids[0], h.timers[ids[0]], true
}

// step feeds one event and plays the driver's bookkeeping for the effects.
func (h *harness) step(m *Machine, ev Event) []string {
	effs := m.Step(h.now, ev)
	out := make([]string, 0, len(effs))
	for _, e := range effs {
		switch e := e.(type) {
		case SetTimer:
			h.timers[e.ID] = e.At
		case CancelTimer:
			delete(h.timers, e.ID)
		case SendPoll:
			h.parked = e.Seq
			h.sent = append(h.sent, e.Seq)
		case PostAck:
			h.posts = append(h.posts, AckPosted{InvocationID: e.Ack.InvocationID})
		case PostExecResult:
			h.posts = append(h.posts, ResultPosted{ExecID: e.ExecID})
		}
		out = append(out, render(e, h.now))
	}
	return out
}

func (h *harness) seq(kv map[string]string) (uint64, error) {
	if s, ok := kv["seq"]; ok {
		return strconv.ParseUint(s, 10, 64)
	}
	if h.parked == 0 {
		return 0, errors.New("no poll was sent")
	}
	return h.parked, nil
}

func (h *harness) configure(kv map[string]string) error {
	if h.m != nil {
		return errors.New("config after the machine started")
	}
	num := func(k string, dst *float64) error {
		if v, ok := kv[k]; ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			*dst = f
		}
		return nil
	}
	var maxInv float64 = float64(h.cfg.MaxInvocations)
	for _, p := range []struct {
		k   string
		dst *float64
	}{{"wait_max_s", &h.cfg.WaitMaxS}, {"retry_min_s", &h.cfg.RetryMinS}, {"retry_max_s", &h.cfg.RetryMaxS},
		{"keep_alive_s", &h.cfg.KeepAliveS}, {"grace_s", &h.cfg.GraceS}, {"max_invocations", &maxInv}} {
		if err := num(p.k, p.dst); err != nil {
			return err
		}
	}
	h.cfg.MaxInvocations = int(maxInv)
	for k, v := range kv {
		switch k {
		case "machine_id":
			h.cfg.MachineID = v
		case "queue":
			h.cfg.Queue = v
		case "label":
			h.cfg.Label = v
		case "tags":
			h.cfg.Tags = strings.Split(v, ",")
		case "lanes":
			h.cfg.Lanes = strings.Split(v, ",")
		case "runners":
			h.cfg.Runners = strings.Split(v, ",")
		case "default_runner":
			h.cfg.DefaultRunner = v
		case "keep_poll_on_wake":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("keep_poll_on_wake: %w", err)
			}
			h.cfg.KeepPollOnWake = b
		case "jitter":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return err
			}
			h.rnd = fixedJitter{f: f, Rand: rand.New(rand.NewPCG(1, 2))}
		}
	}
	return nil
}

// failure builds a failed hello/poll result from `status=N body=… err=…`.
func failure(kv map[string]string, mk func(int, []byte, error) Event) Event {
	status, _ := strconv.Atoi(kv["status"])
	var body []byte
	if b, ok := kv["body"]; ok {
		body = []byte(b)
	}
	if e, ok := kv["error"]; ok { // a msgpack {error, field, message} body
		v := wire.ValidationError{Error: e, Field: kv["field"], Message: kv["message"]}
		body, _ = v.MarshalMsg(nil)
	}
	var err error
	if e, ok := kv["err"]; ok {
		err = errors.New(e)
	}
	return mk(status, body, err)
}

// pollCommands encodes the body lines of a poll-ok block as wire commands,
// exactly as a control plane would send them.
func pollCommands(lines []string, now time.Time) ([]wire.Command, error) {
	var cmds []wire.Command
	for _, l := range lines {
		kind, pos, kv, err := parseArgs(l)
		if err != nil {
			return nil, err
		}
		id := kv["id"]
		if id == "" && len(pos) > 0 {
			id = pos[0]
		}
		var body interface {
			MarshalMsg([]byte) ([]byte, error)
		}
		switch kind {
		case wire.KindExec:
			e := wire.Exec{ExecID: kv["exec_id"], Command: kv["command"]}
			if e.ExecID == "" {
				e.ExecID = "x" + id
			}
			body = &e
		case wire.KindRun:
			r := wire.Run{InvocationID: kv["inv"], Function: wire.Function{Module: "m", Qualname: "f"},
				RunConfig: wire.RunConfig{Runner: kv["runner"]}, ArgsBlob: wire.Blob("a")}
			if r.InvocationID == "" {
				r.InvocationID = "i" + id
			}
			body = &r
		case wire.KindSetup:
			s := wire.Setup{Script: kv["script"], Sudo: slices.Contains(pos, "sudo"), RefreshCapabilities: slices.Contains(pos, "refresh")}
			if n, ok := kv["name"]; ok {
				s.Name = &n
			}
			body = &s
		case wire.KindHibernate:
			d, err := time.ParseDuration(strings.TrimPrefix(kv["for"], "+"))
			if err != nil {
				return nil, fmt.Errorf("hibernate for=: %w", err)
			}
			body = &wire.Hibernate{UntilEpochS: wire.Number(wire.TimestampOf(now.Add(d)))}
		case wire.KindOTAUpdate:
			body = &wire.OTAUpdate{Version: kv["version"], URL: "https://plane.example/bin/nymph", SHA256: kv["sha256"]}
		case wire.KindResetBackoff, wire.KindRotateKey:
		case "raw": // a kind with an arbitrary (here: msgpack string) body
			kind = kv["kind"]
			cmds = append(cmds, wire.Command{ID: id, Kind: kind, Body: []byte{0xa1, 'x'}})
			continue
		default:
			// An unknown kind with a nil body.
		}
		raw := []byte{0xc0}
		if body != nil {
			if raw, err = body.MarshalMsg(nil); err != nil {
				return nil, err
			}
		}
		cmds = append(cmds, wire.Command{ID: id, Kind: kind, Body: raw})
	}
	return cmds, nil
}

// parseArgs splits `name pos key=value key="quoted value"`.
func parseArgs(line string) (name string, pos []string, kv map[string]string, err error) {
	kv = map[string]string{}
	var toks []string
	for s := strings.TrimSpace(line); s != ""; s = strings.TrimSpace(s) {
		end := 0
		for end < len(s) && s[end] != ' ' {
			if s[end] == '"' {
				q, err := strconv.QuotedPrefix(s[end:])
				if err != nil {
					return "", nil, nil, fmt.Errorf("bad quoting in %q", line)
				}
				end += len(q)
				continue
			}
			end++
		}
		toks = append(toks, s[:end])
		s = s[end:]
	}
	if len(toks) == 0 {
		return "", nil, nil, errors.New("empty command")
	}
	for _, tok := range toks[1:] {
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			pos = append(pos, tok)
			continue
		}
		if strings.HasPrefix(v, `"`) {
			if v, err = strconv.Unquote(v); err != nil {
				return "", nil, nil, fmt.Errorf("bad quoting in %q", tok)
			}
		}
		kv[k] = v
	}
	return toks[0], pos, kv, nil
}
