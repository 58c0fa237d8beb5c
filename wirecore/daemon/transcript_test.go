package daemon

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/nymphd/nymph/internal/transcript"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Transcript tests: each testdata/*.txt file is a conversation with the
// machine, written the way docs/architecture.md ("How a daemon behaves")
// tells the story, run by cockroachdb/datadriven. A case is
//
//	command positional… key=value …
//	input lines (poll-ok only: one wire command each, `kind key=value …`)
//	----
//	expected effects, one per line
//	<blank line>
//
// Lines starting with # between cases are comments. Arguments are split at
// spaces, as datadriven does; a value that starts with a double quote is a
// Go string literal (`err="status 503"`, `body="{\"error\":…}"`), and the
// pieces datadriven split off it are joined again with one space before it
// is unquoted, so a quoted value cannot hold two spaces in a row, nor a
// word after a space that starts with '=' or holds '=(' (write \x20 for
// such a space). datadriven's lists, key=(a, b), are not used: a list is
// comma-separated (runners=process,docker). A key appears once per line.
//
// The harness plays the driver: it keeps a fake clock and the armed timers
// (so `tick` fires what is due, in order), remembers the parked poll's Seq
// and the posts that wait for an answer. `go test -run Transcript -rewrite`
// rewrites the expectations; review the diff against the spec before
// keeping it.
//
// The commands (one function per family below):
//
//	config key=value …            the Config (and jitter=F, a fixed
//	                              backoff jitter); before anything else
//	boot, signal KIND             Boot, Signal
//	hello-ok [worker_id=] [reject= message=]
//	hello-fail status= [body=] [error= field= message=] [err=]
//	poll-ok [seq=] + input lines, poll-fail [seq=] status= … as hello-fail
//	                              (seq defaults to the parked poll's)
//	exec-done EXEC exit= [stdout=]
//	run-done INV state= [blob=] [error=TYPE:MESSAGE]
//	setup-done CMD [exit=] [killed] [signal=] [err=]
//	caps CMD runners=a,b [err=]   CapabilitiesRefreshed
//	posts-ok                      every pending post answered 200
//	post-fail [status=] err=      the oldest pending post failed (no
//	                              status: no answer at all)
//	tick +DURATION                the clock moves, due timers fire in order
//	fire ID at=DURATION           a late TimerFired, at epoch+DURATION
//	status                        the machine's Status
func TestTranscripts(t *testing.T) {
	transcript.RunAll(t, func() func(*testing.T, *datadriven.TestData) string { return newHarness().run })
}

// epoch is the fake clock's start: 2026-01-01T00:00:00Z.
var epoch = time.Unix(1767225600, 0).UTC()

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

func (h *harness) machine() *Machine {
	if h.m == nil {
		h.m = New(h.cfg, h.rnd)
	}
	return h.m
}

// run plays one case and returns the effects it caused, rendered.
func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	// datadriven prints the case from CmdArgs on a failure: as written.
	written := d.CmdArgs
	defer func() { d.CmdArgs = written }()
	d.CmdArgs = joinQuoted(t, d.Pos, d.CmdArgs)
	if d.Input != "" && d.Cmd != "poll-ok" {
		d.Fatalf(t, "%s takes no input lines", d.Cmd)
	}
	if d.Cmd == "config" {
		h.configure(t, d)
		return ""
	}
	m := h.machine()
	var evs []Event
	switch d.Cmd {
	case "boot":
		evs = []Event{Boot{}}
	case "signal":
		evs = []Event{Signal{Kind: SignalKind(positional(t, d))}}
	case "hello-ok", "hello-fail":
		evs = []Event{h.hello(t, d)}
	case "poll-ok", "poll-fail":
		evs = []Event{h.poll(t, d)}
	case "exec-done", "run-done", "setup-done", "caps":
		evs = []Event{h.finished(t, d)}
	case "posts-ok", "post-fail":
		evs = h.answerPosts(t, d)
	case "revoked":
		evs = []Event{KeyRevoked{Message: positional(t, d)}}
	case "drain-noticed":
		evs = []Event{DrainNoticed{}}
	case "ota-fetched":
		version, _ := str(d, "version")
		ev := OTAFetched{CommandID: positional(t, d), Version: version}
		if e, ok := str(d, "err"); ok {
			ev.Err = errors.New(e)
		}
		evs = []Event{ev}
	case "ota-applied":
		e, _ := str(d, "err")
		evs = []Event{OTAApplied{CommandID: positional(t, d), Err: errors.New(e)}}
	case "tick", "fire":
		return h.clock(t, d, m)
	case "status":
		return renderStatus(m.Status(), h.now)
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, h.step(m, ev)...)
	}
	return strings.Join(out, "\n")
}

// configure applies `config key=value …` to the Config the machine will be
// built with.
func (h *harness) configure(t *testing.T, d *datadriven.TestData) {
	if h.m != nil {
		d.Fatalf(t, "config after the machine started")
	}
	fields := h.configFields()
	for _, a := range d.CmdArgs {
		v, _ := str(d, a.Key)
		switch dst := fields[a.Key].(type) {
		case *string:
			*dst = v
		case *[]string:
			*dst = strings.Split(v, ",")
		case nil:
			if a.Key != "jitter" {
				d.Fatalf(t, "config: unknown key %q", a.Key)
			}
			var f float64
			d.ScanArgs(t, a.Key, &f)
			h.rnd = fixedJitter{f: f, Rand: rand.New(rand.NewPCG(1, 2))}
		default:
			d.ScanArgs(t, a.Key, dst)
		}
	}
}

// configFields are the Config fields `config` sets, by key: a string as it
// is written, a list split at its commas, anything else scanned.
func (h *harness) configFields() map[string]any {
	c := &h.cfg
	return map[string]any{
		"wait_max_s":        &c.WaitMaxS,
		"retry_min_s":       &c.RetryMinS,
		"retry_max_s":       &c.RetryMaxS,
		"keep_alive_s":      &c.KeepAliveS,
		"grace_s":           &c.GraceS,
		"max_invocations":   &c.MaxInvocations,
		"keep_poll_on_wake": &c.KeepPollOnWake,
		"machine_id":        &c.MachineID,
		"queue":             &c.Queue,
		"label":             &c.Label,
		"default_runner":    &c.DefaultRunner,
		"tags":              &c.Tags,
		"lanes":             &c.Lanes,
		"runners":           &c.Runners,
		"extensions":        &c.Extensions,
		"cursor":            &c.Cursor,
		"applied":           &c.Applied,
	}
}

// hello answers the hello in flight: hello-ok with a HelloResponse,
// hello-fail as failure reads it.
func (h *harness) hello(t *testing.T, d *datadriven.TestData) Event {
	if d.Cmd == "hello-fail" {
		return failure(t, d, func(status int, body []byte, err error) Event {
			return HelloResult{Status: status, Body: body, Err: err, RetryAfter: retryAfterArg(t, d)}
		})
	}
	resp := &wire.HelloResponse{}
	if id, ok := str(d, "worker_id"); ok {
		resp.WorkerID = &id
	}
	if code, ok := str(d, "reject"); ok {
		msg, _ := str(d, "message")
		resp.Reject = &wire.Reject{Code: code, Message: msg}
	}
	if ext, ok := str(d, "ext"); ok {
		resp.Config = map[string]msgp.Raw{wire.ConfigExtensions: wire.EncodeExtensions(strings.Split(ext, ","))}
	}
	if c, ok := str(d, "config"); ok {
		if resp.Config == nil {
			resp.Config = map[string]msgp.Raw{}
		}
		addLiveConfig(t, d, resp.Config, c)
	}
	return HelloResult{Status: 200, Response: resp}
}

// addLiveConfig puts config=k:v,k:v into dst, numbers as numbers (a
// value "raw" puts a string where a number goes).
func addLiveConfig(t *testing.T, d *datadriven.TestData, dst map[string]msgp.Raw, spec string) {
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, ":")
		if k == "" {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			dst[k] = msgp.AppendFloat64(nil, f)
		} else {
			dst[k] = msgp.AppendString(nil, v)
		}
	}
}

// poll answers a poll (seq=N, or the parked one): poll-ok with the wire
// commands of its input lines, poll-fail as failure reads it.
func (h *harness) poll(t *testing.T, d *datadriven.TestData) Event {
	seq := h.parked
	if !d.MaybeScanArgs(t, "seq", &seq) && seq == 0 {
		d.Fatalf(t, "no poll was sent")
	}
	if d.Cmd == "poll-fail" {
		return failure(t, d, func(status int, body []byte, err error) Event {
			return PollResult{Seq: seq, Status: status, Body: body, Err: err, RetryAfter: retryAfterArg(t, d)}
		})
	}
	resp := &wire.PollResponse{Commands: pollCommands(t, d, h.now)}
	if c, ok := str(d, "cursor"); ok {
		resp.Cursor = &c
	}
	if c, ok := str(d, "config"); ok {
		resp.Config = map[string]msgp.Raw{}
		addLiveConfig(t, d, resp.Config, c)
	}
	return PollResult{Seq: seq, Status: 200, Response: resp}
}

// failure builds a failed hello/poll result from `status=N body=… err=…`,
// or error= field= message= for a msgpack {error, field, message} body.
func failure(t *testing.T, d *datadriven.TestData, mk func(int, []byte, error) Event) Event {
	var status int
	d.MaybeScanArgs(t, "status", &status)
	var body []byte
	if b, ok := str(d, "body"); ok {
		body = []byte(b)
	}
	if e, ok := str(d, "error"); ok {
		field, _ := str(d, "field")
		msg, _ := str(d, "message")
		v := wire.ValidationError{Error: e, Field: field, Message: msg}
		body, _ = v.MarshalMsg(nil)
	}
	var err error
	if e, ok := str(d, "err"); ok {
		err = errors.New(e)
	}
	return mk(status, body, err)
}

// retryAfterArg is retry_after=SECONDS, the answer's Retry-After.
func retryAfterArg(t *testing.T, d *datadriven.TestData) time.Duration {
	var secs int
	d.MaybeScanArgs(t, "retry_after", &secs)
	return time.Duration(secs) * time.Second
}

// finished is the driver reporting that an exec, a run, a setup or a
// capability detection is over.
func (h *harness) finished(t *testing.T, d *datadriven.TestData) Event {
	id := positional(t, d)
	var code int
	d.MaybeScanArgs(t, "exit", &code)
	errArg := func() error {
		if e, ok := str(d, "err"); ok {
			return errors.New(e)
		}
		return nil
	}
	switch d.Cmd {
	case "exec-done":
		stdout, _ := str(d, "stdout")
		return ExecFinished{ExecID: id, Result: wire.ExecResult{ExitCode: wire.Int(code), Stdout: stdout, DurationMS: 3}}
	case "run-done":
		state, _ := str(d, "state")
		blob, _ := str(d, "blob")
		ev := RunFinished{InvocationID: id, State: state, ResultBlob: []byte(blob)}
		if e, ok := str(d, "error"); ok {
			typ, msg, _ := strings.Cut(e, ":")
			ev.Error = &wire.ErrorInfo{TypeName: typ, Message: msg}
		}
		return ev
	case "setup-done":
		signal, _ := str(d, "signal")
		return SetupFinished{CommandID: id, ExitCode: code, Killed: slices.Contains(flags(d), "killed"), Signal: signal, Err: errArg()}
	default: // caps
		runners, _ := str(d, "runners")
		return CapabilitiesRefreshed{CommandID: id, Err: errArg(), Capabilities: wire.Capabilities{
			Runners: strings.Split(runners, ","), MaxInvocations: wire.Int(h.cfg.MaxInvocations), Workdir: h.cfg.Workdir}}
	}
}

// answerPosts answers the posts in flight: posts-ok all of them with 200,
// post-fail the oldest with status= (none: no answer at all) and err=.
func (h *harness) answerPosts(t *testing.T, d *datadriven.TestData) []Event {
	if d.Cmd == "posts-ok" {
		evs := h.posts
		h.posts = nil
		return evs
	}
	if len(h.posts) == 0 {
		d.Fatalf(t, "no post pending")
	}
	status := 0
	d.MaybeScanArgs(t, "status", &status)
	e, _ := str(d, "err")
	var evs []Event
	switch p := h.posts[0].(type) {
	case AckPosted:
		p.Status, p.Err = status, errors.New(e)
		evs = append(evs, p)
	case ResultPosted:
		p.Status, p.Err = status, errors.New(e)
		evs = append(evs, p)
	}
	h.posts = h.posts[1:]
	return evs
}

// clock is tick +DURATION (the clock moves on, firing what falls due) and
// fire ID at=DURATION (a timer event the driver delivers late, after a
// re-arm or cancel).
func (h *harness) clock(t *testing.T, d *datadriven.TestData, m *Machine) string {
	if d.Cmd == "fire" {
		id := positional(t, d)
		var at time.Duration
		d.ScanArgs(t, "at", &at)
		return strings.Join(h.step(m, TimerFired{ID: TimerID(id), At: epoch.Add(at)}), "\n")
	}
	dur, err := time.ParseDuration(strings.TrimPrefix(positional(t, d), "+"))
	if err != nil {
		d.Fatalf(t, "tick: %v", err)
	}
	return h.tick(m, dur)
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

// pollCommands encodes the input lines of a poll-ok case as wire commands,
// exactly as a control plane would send them. A line is `kind id=ID key=…`
// (or `kind ID …`) and reads as a directive line does.
func pollCommands(t *testing.T, d *datadriven.TestData, now time.Time) []wire.Command {
	var cmds []wire.Command
	if d.Input == "" {
		return nil // a poll that brought nothing
	}
	for i, line := range strings.Split(d.Input, "\n") {
		pos := linePos(d.Pos, i+1)
		kind, args, err := datadriven.ParseLine(line)
		if err != nil || kind == "" {
			t.Fatalf("%s: bad command line %q: %v", pos, line, err)
		}
		c := &datadriven.TestData{Pos: pos, Cmd: kind, CmdArgs: joinQuoted(t, pos, args)}
		id, _ := str(c, "id")
		if p := flags(c); id == "" && len(p) > 0 {
			id = p[0]
		}
		var body interface {
			MarshalMsg([]byte) ([]byte, error)
		}
		switch kind {
		case wire.KindExec:
			execID, _ := str(c, "exec_id")
			command, _ := str(c, "command")
			if execID == "" {
				execID = "x" + id
			}
			body = &wire.Exec{ExecID: execID, Command: command}
		case wire.KindRun:
			inv, _ := str(c, "inv")
			runner, _ := str(c, "runner")
			if inv == "" {
				inv = "i" + id
			}
			body = &wire.Run{InvocationID: inv, Function: wire.Function{Module: "m", Qualname: "f"},
				RunConfig: wire.RunConfig{Runner: runner}, ArgsBlob: wire.Blob("a")}
		case wire.KindSetup:
			script, _ := str(c, "script")
			s := wire.Setup{Script: script, Sudo: slices.Contains(flags(c), "sudo"), RefreshCapabilities: slices.Contains(flags(c), "refresh")}
			if n, ok := str(c, "name"); ok {
				s.Name = &n
			}
			body = &s
		case wire.KindHibernate:
			f, _ := str(c, "for")
			dur, err := time.ParseDuration(strings.TrimPrefix(f, "+"))
			if err != nil {
				c.Fatalf(t, "hibernate for=: %v", err)
			}
			body = &wire.Hibernate{UntilEpochS: wire.Number(wire.TimestampOf(now.Add(dur)))}
		case wire.KindOTAUpdate:
			version, _ := str(c, "version")
			sha, _ := str(c, "sha256")
			body = &wire.OTAUpdate{Version: version, URL: "https://plane.example/bin/nymph", SHA256: sha}
		case wire.KindCancel:
			inv, _ := str(c, "inv")
			execID, _ := str(c, "exec_id")
			reason, _ := str(c, "reason")
			body = &wire.Cancel{InvocationID: inv, ExecID: execID, Reason: reason}
		case wire.KindResetBackoff, wire.KindRotateKey:
		case "raw": // a kind with an arbitrary (here: msgpack string) body
			k, _ := str(c, "kind")
			cmds = append(cmds, wire.Command{ID: id, Kind: k, Body: []byte{0xa1, 'x'}})
			continue
		default:
			// An unknown kind with a nil body.
		}
		raw := []byte{0xc0}
		if body != nil {
			if raw, err = body.MarshalMsg(nil); err != nil {
				c.Fatalf(t, "%v", err)
			}
		}
		cmds = append(cmds, wire.Command{ID: id, Kind: kind, Body: raw})
	}
	return cmds
}

// joinQuoted is transcript.JoinQuoted, failing the case at pos.
func joinQuoted(t *testing.T, pos string, args []datadriven.CmdArg) []datadriven.CmdArg {
	out, err := transcript.JoinQuoted(args)
	if err != nil {
		t.Fatalf("%s: %v", pos, err)
	}
	return out
}

// str returns the value of key=value (unquoted, untrimmed); ok is false
// when the line has no such key with a value.
func str(d *datadriven.TestData, key string) (v string, ok bool) {
	a, ok := d.Arg(key)
	if !ok || len(a.Vals) == 0 {
		return "", false
	}
	return a.Vals[0], true
}

// flags returns the arguments without a value (`exec-done e1`, `sudo`), in
// order.
func flags(d *datadriven.TestData) []string {
	var out []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			out = append(out, a.Key)
		}
	}
	return out
}

// positional returns the first argument without a value: the id or kind a
// command is about.
func positional(t *testing.T, d *datadriven.TestData) string {
	p := flags(d)
	if len(p) == 0 {
		d.Fatalf(t, "%s needs an id, kind or duration first", d.Cmd)
	}
	return p[0]
}

// linePos is the file:line of the k-th line after the one at pos.
func linePos(pos string, k int) string {
	i := strings.LastIndexByte(pos, ':')
	n, err := strconv.Atoi(pos[i+1:])
	if i < 0 || err != nil {
		return pos
	}
	return fmt.Sprintf("%s:%d", pos[:i], n+k)
}
