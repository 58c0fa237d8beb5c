package plane_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nymphd/nymph/internal/transcript"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// Transcript tests: each testdata/*.txt file is a conversation with the
// plane, run by cockroachdb/datadriven. A case is
//
//	<command> key=value ...
//	----
//	<expected effects, one per line>
//
// followed by a blank line; "#" lines between cases are comments. A bare
// key (stream, refresh) is a flag; a list is comma-separated
// (tags=host=local,gpu=a100); a value that starts with a double quote is
// a Go string literal, and the pieces datadriven splits it into at its
// spaces are joined again with one space, so it cannot hold two spaces in
// a row. Ids the plane makes are shown as aliases (W1 for workers, C1
// commands, X1 execs, I1 invocations) and accepted as arguments. Times
// are seconds since the transcript's t0. `go test -run Transcripts
// -rewrite` rewrites the expectations.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// transcriptRetain is Config.Retain in every transcript (retain.txt).
const transcriptRetain = time.Hour

func TestTranscripts(t *testing.T) {
	transcript.RunAll(t, func() func(*testing.T, *datadriven.TestData) string { return newHarness().run })
}

type harness struct {
	require bool              // Config.RequireSignatures
	secrets map[string]string // token alias → its secret
	nonces  int
	p       *plane.Plane
	stored  *plane.RecordSet
	now     time.Time
	alias   map[string]string // id → alias
	ids     map[string]string // alias → id
	counts  map[string]int
	entropy *rand.ChaCha8
}

func newHarness() *harness {
	h := &harness{now: t0, alias: map[string]string{}, ids: map[string]string{}, counts: map[string]int{}, secrets: map[string]string{},
		entropy: rand.NewChaCha8([32]byte{'n', 'y', 'm', 'p', 'h'}), stored: plane.NewRecordSet()}
	h.p = plane.New(h.config())
	return h
}

func (h *harness) config() plane.Config {
	return plane.Config{Entropy: h.entropy, KeyRotationMaxAgeS: 2592000, Retain: transcriptRetain,
		Audience: transcriptAudience, OtherAudiences: []string{transcriptOtherName}, RequireSignatures: h.require}
}

// name returns the alias of an id, making one with prefix when new.
func (h *harness) name(prefix, id string) string {
	if id == "" {
		return `""`
	}
	if a, ok := h.alias[id]; ok {
		return a
	}
	h.counts[prefix]++
	a := fmt.Sprintf("%s%d", prefix, h.counts[prefix])
	h.alias[id], h.ids[a] = a, id
	return a
}

// id resolves an argument: an alias, or the literal value.
func (h *harness) id(v string) string {
	if id, ok := h.ids[v]; ok {
		return id
	}
	if rest, ok := strings.CutPrefix(v, wire.SetupInvocationPrefix); ok {
		return wire.SetupInvocationPrefix + h.id(rest)
	}
	return v
}

func (h *harness) rel(t time.Time) string {
	return strconv.FormatFloat(t.Sub(t0).Seconds(), 'f', -1, 64) + "s"
}

// joinQuoted is transcript.JoinQuoted, failing case d.
func joinQuoted(t *testing.T, d *datadriven.TestData) []datadriven.CmdArg {
	out, err := transcript.JoinQuoted(d.CmdArgs)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return out
}

// str is the value of key=value (unquoted, untrimmed), "" when the case
// has none.
func str(d *datadriven.TestData, key string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return ""
}

// list is key=a,b,c split at its commas, nil when the case has none.
func list(d *datadriven.TestData, key string) []string {
	if v := str(d, key); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// inlinePayload is inline=N: N bytes of payload_inline.
func inlinePayload(t *testing.T, d *datadriven.TestData) []byte {
	if n := int(float(t, d, "inline", 0)); n > 0 {
		return bytes.Repeat([]byte("p"), n)
	}
	return nil
}

// payloadRef is ref=BUCKET/KEY [size=N] [sha=HEX]: a payload_ref.
func payloadRef(t *testing.T, d *datadriven.TestData) *wire.PayloadRef {
	bk := str(d, "ref")
	if bk == "" {
		return nil
	}
	bucket, key, _ := strings.Cut(bk, "/")
	r := &wire.PayloadRef{Bucket: bucket, Key: key, Size: wire.Int(float(t, d, "size", 0)), ContentType: wire.ContentTypeOctets}
	if sha := str(d, "sha"); sha != "" {
		r.SHA256 = &sha
	}
	return r
}

// showLiveConfig renders a config map's live keys, sorted, as k=v.
func showLiveConfig(c map[string]msgp.Raw) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if k == wire.ConfigExtensions {
			continue
		}
		if k == wire.ConfigGeneration {
			g, _, _ := msgp.ReadUint64Bytes(c[k])
			out = append(out, fmt.Sprintf("gen=%d", g))
			continue
		}
		v, err := wire.DecodeLiveConfig(k, c[k])
		switch {
		case err != nil:
			out = append(out, k+"=?")
		case v.Level != "":
			out = append(out, k+"="+string(v.Level))
		default:
			out = append(out, fmt.Sprintf("%s=%g", k, v.Number))
		}
	}
	return "{" + strings.Join(out, ",") + "}"
}

func showArgs(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return fmt.Sprintf(" args=%dB", len(b))
}

// showPayload renders an exec's or run's payload fields.
func showPayload(inline []byte, ref *wire.PayloadRef) string {
	s := ""
	if len(inline) > 0 {
		s += fmt.Sprintf(" payload_inline=%dB", len(inline))
	}
	if ref != nil {
		s += fmt.Sprintf(" payload_ref=%s/%s size=%d", ref.Bucket, ref.Key, ref.Size)
		if ref.SHA256 != nil {
			s += " sha256=" + (*ref.SHA256)[:8] + "…"
		}
	}
	return s
}

// float is key=F, def when the case has no key.
func float(t *testing.T, d *datadriven.TestData, key string, def float64) float64 {
	d.MaybeScanArgs(t, key, &def)
	return def
}

// req is the request a case names (req=N).
func req(t *testing.T, d *datadriven.TestData) plane.RequestID {
	var id plane.RequestID
	d.ScanArgs(t, "req", &id)
	return id
}

// run plays one case and returns the effects it caused, rendered.
func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	// datadriven prints the case from CmdArgs on a failure: as written.
	written := d.CmdArgs
	defer func() { d.CmdArgs = written }()
	d.CmdArgs = joinQuoted(t, d)
	if d.Input != "" {
		d.Fatalf(t, "%s takes no input lines", d.Cmd)
	}
	var ev plane.Event
	switch d.Cmd {
	case "advance":
		var by time.Duration
		d.ScanArgs(t, "by", &by)
		h.now = h.now.Add(by)
		return "now " + h.rel(h.now)
	case "restart":
		// A restart keeps only what was persisted (the nonce memory is
		// not); require-signatures=on|off restarts with that policy.
		if v := str(d, "require-signatures"); v != "" {
			h.require = v == "on"
		}
		p, err := plane.Restore(h.config(), h.stored.Snapshot(), h.now)
		if err != nil {
			d.Fatalf(t, "restore: %v", err)
		}
		h.p = p
		return "restored"
	case "hello":
		raw := helloBody(d, h.publicKey(str(d, "pub")))
		missing, err := plane.MissingHelloField(raw)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		var body wire.HelloRequest
		if missing == "" {
			if _, err := body.UnmarshalMsg(raw); err != nil {
				d.Fatalf(t, "decode hello: %v", err)
			}
		}
		a := h.auth(t, d, wire.PathHello, raw)
		a.EnrollSecret = h.secret(str(d, "token"))
		ev = plane.Hello{Req: req(t, d), Body: body, Missing: missing, Auth: a}
	case "poll":
		body := wire.PollRequest{WorkerID: h.id(str(d, "worker")), Queue: str(d, "queue"), TimeoutS: wire.Float(float(t, d, "timeout", 20))}
		for _, inv := range list(d, "running") {
			body.Invocations = append(body.Invocations, wire.InvocationStatus{InvocationID: h.id(inv), State: wire.StateRunning, StdoutTail: str(d, "tail")})
		}
		if str(d, "caps") != "" {
			body.UpdatedCapabilities = &wire.Capabilities{Runners: list(d, "caps"), MaxInvocations: 4}
		}
		body.Draining = d.HasArg("draining")
		body.CapabilitiesGen = uint64(float(t, d, "gen", 0))
		if c := str(d, "cursor"); c != "" {
			body.Cursor = &c
		}
		ev = plane.Poll{Req: req(t, d), Body: body, Auth: h.auth(t, d, wire.PathPoll, marshal(&body))}
	case "deadline":
		ev = plane.PollDeadline{Req: req(t, d)}
	case "gone":
		ev = plane.Gone{Req: req(t, d)}
	case "undelivered":
		ev = plane.Undelivered{Req: req(t, d)}
	case "tick":
		ev = plane.Tick{}
	case "ack":
		body := wire.Ack{InvocationID: h.id(str(d, "inv")), State: str(d, "state"), ResultBlob: wire.SharedBlob(str(d, "blob")), WorkerID: h.id(str(d, "worker"))}
		if typ, msg, ok := strings.Cut(str(d, "error"), ":"); ok {
			body.Error = &wire.ErrorInfo{TypeName: typ, Message: msg}
		}
		ev = plane.Ack{Req: req(t, d), Body: body, Auth: h.auth(t, d, wire.PathAck, marshal(&body))}
	case "result":
		body := wire.ExecResult{ExitCode: wire.Int(float(t, d, "exit", 0)), Stdout: str(d, "stdout")}
		x := h.id(str(d, "exec"))
		ev = plane.ExecResult{Req: req(t, d), ExecID: x, Body: body, Auth: h.auth(t, d, wire.PathExecResult(x), marshal(&body))}
	case "chunk":
		x, data := h.id(str(d, "exec")), []byte(str(d, "data"))
		ev = plane.Chunk{Req: req(t, d), ExecID: x, Data: data, Auth: h.auth(t, d, wire.PathExecChunk(x), data)}
	case "keys":
		ev = h.keys(t, d)
	case "event":
		ev = plane.Authenticate{Req: req(t, d), Auth: h.auth(t, d, wire.PathEvent, nil)}
	case "mint":
		return h.mint(t, d)
	case "tokens":
		ev = plane.ListTokens{Req: req(t, d)}
	case "revoke":
		ev = plane.RevokeKey{Req: req(t, d), WorkerID: h.id(str(d, "worker"))}
	case "workers":
		ev = plane.ListWorkers{Req: req(t, d)}
	case "worker":
		ev = plane.GetWorker{Req: req(t, d), WorkerID: h.id(str(d, "id"))}
	case "exec":
		body := operator.ExecRequest{Command: str(d, "cmd"), Stream: d.HasArg("stream"),
			PayloadInline: inlinePayload(t, d), PayloadRef: payloadRef(t, d)}
		ev = plane.EnqueueExec{Req: req(t, d), WorkerID: h.id(str(d, "worker")), Body: body}
	case "setup":
		body := operator.SetupRequest{Script: str(d, "script"), RefreshCapabilities: d.HasArg("refresh"), Sudo: d.HasArg("sudo")}
		ev = plane.EnqueueSetup{Req: req(t, d), WorkerID: h.id(str(d, "worker")), Body: body}
	case "hibernate":
		until := h.now.Add(time.Duration(float(t, d, "for", 0) * float64(time.Second)))
		ev = plane.EnqueueHibernate{Req: req(t, d), WorkerID: h.id(str(d, "worker")),
			Body: operator.HibernateRequest{UntilEpochS: float64(until.Unix())}}
	case "reset":
		ev = plane.EnqueueReset{Req: req(t, d), WorkerID: h.id(str(d, "worker"))}
	case "rotate":
		ev = plane.EnqueueRotateKey{Req: req(t, d), WorkerID: h.id(str(d, "worker"))}
	case "update":
		ev = plane.EnqueueUpdate{Req: req(t, d), WorkerID: h.id(str(d, "worker")),
			Body: operator.UpdateRequest{Version: str(d, "version"), URL: "https://cp.example/bin", SHA256: str(d, "sha256")}}
	case "execstatus":
		ev = plane.GetExec{Req: req(t, d), ExecID: h.id(str(d, "exec"))}
	case "logs":
		ev = plane.WaitLogs{Req: req(t, d), ExecID: h.id(str(d, "exec")), Offset: int64(float(t, d, "offset", 0)), WaitS: float(t, d, "wait", 0)}
	case "run":
		body := operator.RunRequest{Queue: str(d, "queue"), Function: wire.Function{Module: "jobs", Qualname: str(d, "fn")},
			RunConfig: wire.RunConfig{Runner: str(d, "runner")}, RequiredTags: list(d, "tags"),
			ArgsBlob: []byte(str(d, "args")), PayloadRef: payloadRef(t, d)}
		ev = plane.EnqueueRun{Req: req(t, d), Body: body}
	case "invocations":
		ev = plane.ListInvocations{Req: req(t, d)}
	case "invocation":
		ev = plane.GetInvocation{Req: req(t, d), InvocationID: h.id(str(d, "id"))}
	case "kill":
		ev = plane.Kill{Req: req(t, d), InvocationID: h.id(str(d, "inv")), Reason: str(d, "reason")}
	case "setconfig":
		set := map[string]string{}
		for _, kv := range list(d, "set") {
			k, v, _ := strings.Cut(kv, ":")
			set[k] = v
		}
		ev = plane.SetConfig{Req: req(t, d), WorkerID: h.id(str(d, "worker")), Set: set}
	case "killexec":
		ev = plane.KillExec{Req: req(t, d), ExecID: h.id(str(d, "exec")), Reason: str(d, "reason")}
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return h.step(t, d, ev)
}

// step plays ev and renders its effects.
func (h *harness) step(t *testing.T, d *datadriven.TestData, ev plane.Event) string {
	var lines []string
	effects := h.p.Step(h.now, ev)
	if msg := h.p.RunningIndexError(); msg != "" {
		t.Fatalf("%s: %s", d.Pos, msg)
	}
	if msg := h.p.SetupIndexError(); msg != "" {
		t.Fatalf("%s: %s", d.Pos, msg)
	}
	for _, eff := range effects {
		if p, ok := eff.(plane.Persist); ok {
			if err := h.stored.Apply(&p.Batch); err != nil {
				d.Fatalf(t, "store refused the batch: %v", err)
			}
		}
		lines = append(lines, h.show(eff)...)
	}
	// Every step must leave the store holding the plane's state: nothing
	// the plane knows may be lost by a crash after the step.
	if diff := cmp.Diff(h.stored.Snapshot(), h.p.Snapshot(), storedOpts); diff != "" {
		d.Fatalf(t, "store and plane differ (-stored +plane):\n%s", diff)
	}
	if len(lines) == 0 {
		return "(nothing)"
	}
	return strings.Join(lines, "\n")
}

// helloBody builds a raw hello; omit=a.b drops a key to test admission,
// protocol=null sends a null protocol, pub (when not "") is its
// public_key.
func helloBody(d *datadriven.TestData, pub string) []byte {
	proto := any("1")
	if d.HasArg("protocol") {
		v := str(d, "protocol")
		proto = v
		if v == "null" {
			proto = nil
		}
	}
	runners := []any{"process"}
	if str(d, "runners") != "" {
		runners = nil
		for _, r := range list(d, "runners") {
			runners = append(runners, r)
		}
	}
	strs := func(k string) []any {
		out := []any{}
		for _, s := range list(d, k) {
			out = append(out, s)
		}
		return out
	}
	versions := map[string]any{"daemon": "0.1.0", "protocol": proto}
	if v := str(d, "daemon"); v != "" {
		versions["daemon"] = v
	}
	for _, k := range []string{"runsc", "docker", "python", "kernel", "distro", "arch", "cpu", "gpu"} {
		versions[k] = nil
	}
	m := map[string]any{
		"machine_id":   str(d, "machine"),
		"label":        str(d, "label"),
		"tags":         strs("tags"),
		"capabilities": map[string]any{"runners": runners, "max_invocations": int64(4), "workdir": "/tmp/w"},
		"versions":     versions,
	}
	if str(d, "lanes") != "" {
		m["lanes"] = strs("lanes")
	}
	if pub != "" {
		m["public_key"] = pub
	}
	if str(d, "ext") != "" {
		m["nymph_extensions"] = strs("ext")
	}
	if c := str(d, "cursor"); c != "" {
		m["nymph_cursor"] = c
	}
	if o := str(d, "omit"); o != "" {
		parent, child, nested := strings.Cut(o, ".")
		if nested {
			delete(m[parent].(map[string]any), child)
		} else {
			delete(m, parent)
		}
	}
	raw, err := msgp.AppendIntf(nil, m)
	if err != nil {
		panic(err)
	}
	return raw
}

func (h *harness) show(eff plane.Effect) []string {
	switch e := eff.(type) {
	case plane.Persist:
		return h.showBatch(&e.Batch)
	case plane.Park:
		return []string{fmt.Sprintf("park %d until %s", e.Req, h.rel(e.Until))}
	case plane.Reply:
		head := fmt.Sprintf("reply %d %d ", e.Req, e.Status)
		body := h.showBody(e.Body)
		body[0] = head + body[0]
		if f := e.Forgery; f != nil {
			body = append(body, fmt.Sprintf("  forgery signer=%s target=%s what=%q", h.name("W", f.Signer), h.name("W", f.Target), h.aliasText(f.What)))
		}
		return body
	}
	return []string{fmt.Sprintf("unknown effect %T", eff)}
}

func (h *harness) showBatch(b *plane.Batch) []string {
	var out []string
	for _, w := range b.Workers {
		s := fmt.Sprintf("persist worker %s machine=%s state=%s", h.name("W", w.ID), w.MachineID, w.State)
		if len(w.SetupsInFlight) > 0 {
			var ids []string
			for _, f := range w.SetupsInFlight {
				ids = append(ids, h.name("C", f.CommandID))
			}
			s += " setups=" + strings.Join(ids, ",")
		}
		if w.AwaitingCapabilities {
			s += " awaiting-capabilities"
		}
		if w.TargetVersion != "" {
			s += " target=" + w.TargetVersion
		}
		if u := w.Update; u != nil {
			s += " update=" + u.Version + ":" + u.State
			if u.Running != "" {
				s += "(running " + u.Running + ")"
			}
		}
		out = append(out, s+h.showKeys(&w))
	}
	for _, tk := range b.Tokens {
		out = append(out, h.showToken(&tk))
	}
	for _, c := range b.Commands {
		out = append(out, fmt.Sprintf("persist command %s %s for %s", h.name("C", c.ID), c.Kind, h.name("W", c.WorkerID)))
	}
	for _, inv := range b.Invocations {
		s := fmt.Sprintf("persist invocation %s %s queue=%s", h.name("I", inv.ID), inv.State, inv.Queue)
		if inv.WorkerID != "" {
			s += " worker=" + h.name("W", inv.WorkerID)
		}
		if inv.Error != nil {
			s += fmt.Sprintf(" error=%s:%q", inv.Error.TypeName, h.aliasText(inv.Error.Message))
		}
		out = append(out, s)
	}
	for _, x := range b.Execs {
		out = append(out, fmt.Sprintf("persist exec %s %s log=%d", h.name("X", x.ExecID), x.State, x.LogSize))
	}
	for _, c := range b.Chunks {
		out = append(out, fmt.Sprintf("persist chunk %s @%d %q", h.name("X", c.ExecID), c.Offset, c.Data))
	}
	for _, id := range b.DeleteCommands {
		out = append(out, "persist delete command "+h.name("C", id))
	}
	for _, id := range b.DeleteInvocations {
		out = append(out, "persist delete invocation "+h.name("I", id))
	}
	for _, id := range b.DeleteExecs {
		out = append(out, "persist delete exec "+h.name("X", id))
	}
	return out
}

func (h *harness) showBody(body any) []string {
	switch b := body.(type) {
	case wire.HelloResponse:
		if b.Reject != nil {
			return []string{fmt.Sprintf("hello reject %s %q", b.Reject.Code, h.aliasText(b.Reject.Message))}
		}
		s := fmt.Sprintf("hello worker=%s ttl=%v", h.name("W", *b.WorkerID), float64(b.SessionTTLS))
		if b.KeyID != nil {
			s += " key_id=" + h.aliasText(*b.KeyID)
		}
		if exts := wire.ConfigExtensionsOf(b.Config); exts != nil {
			s += fmt.Sprintf(" extensions=%v", exts)
		}
		if _, ok := b.Config[wire.ConfigGeneration]; ok {
			s += " config=" + showLiveConfig(b.Config)
		}
		return []string{s}
	case wire.KeyRotationResponse:
		if b.Reject != nil {
			return []string{fmt.Sprintf("keys reject %s %q", b.Reject.Code, h.aliasText(b.Reject.Message))}
		}
		return []string{"keys key_id=" + h.aliasText(string(b.KeyID))}
	case operator.TokenCreated:
		return []string{fmt.Sprintf("token %s expires=%s", h.name("T", b.ID), h.rel(b.ExpiresAt))}
	case []operator.Token:
		out := []string{fmt.Sprintf("%d tokens", len(b))}
		for _, tk := range b {
			s := fmt.Sprintf("  token %s %s queue=%q tags=%v failures=%d", h.name("T", tk.ID), tk.State, tk.Queue, tk.Tags, tk.Failures)
			if tk.WorkerID != "" {
				s += " worker=" + h.name("W", tk.WorkerID)
			}
			out = append(out, s)
		}
		return out
	case operator.KeyRevoked:
		return []string{fmt.Sprintf("revoked %s keys=%s", h.name("W", b.WorkerID), h.aliasText(strings.Join(b.KeyIDs, ",")))}
	case wire.PollResponse:
		s := fmt.Sprintf("poll %d commands", len(b.Commands))
		if b.TargetNymphVersion != nil {
			s += " target=" + *b.TargetNymphVersion
		}
		if b.Cursor != nil {
			s += " cursor=" + *b.Cursor
		}
		if b.Config != nil {
			s += " config=" + showLiveConfig(b.Config)
		}
		out := []string{s}
		for _, c := range b.Commands {
			out = append(out, "  "+h.showCommand(c))
		}
		return out
	case wire.ValidationError:
		return []string{fmt.Sprintf("invalid error=%s field=%s", b.Error, b.Field)}
	case plane.ErrorBody:
		if b.Message != "" && authCodes[b.Error] {
			return []string{fmt.Sprintf("error %s %q", b.Error, h.aliasText(b.Message))}
		}
		return []string{"error " + b.Error}
	case operator.Error:
		return []string{fmt.Sprintf("error %q", h.aliasText(b.Error))}
	case plane.OK:
		return []string{"ok"}
	case plane.LogsRange:
		return []string{fmt.Sprintf("logs %s [%d,%d) finished=%v", h.name("X", b.ExecID), b.Offset, b.End, b.Finished)}
	case operator.Worker:
		return []string{h.showWorker(b)}
	case []operator.Worker:
		out := []string{fmt.Sprintf("%d workers", len(b))}
		for _, w := range b {
			out = append(out, "  "+h.showWorker(w))
		}
		return out
	case operator.ExecAccepted:
		return []string{fmt.Sprintf("exec accepted %s command=%s", h.name("X", b.ExecID), h.name("C", b.CommandID))}
	case operator.CommandAccepted:
		return []string{fmt.Sprintf("accepted %s for %s", h.name("C", b.CommandID), h.name("W", b.WorkerID))}
	case operator.ExecStatus:
		s := fmt.Sprintf("exec %s on %s %s", h.name("X", b.ExecID), h.name("W", b.WorkerID), b.State)
		if b.Result != nil {
			s += fmt.Sprintf(" exit=%d stdout=%q", b.Result.ExitCode, b.Result.Stdout)
		}
		return []string{s}
	case operator.Invocation:
		return []string{h.showInvocation(b)}
	case []operator.Invocation:
		out := []string{fmt.Sprintf("%d invocations", len(b))}
		for _, inv := range b {
			out = append(out, "  "+h.showInvocation(inv))
		}
		return out
	}
	return []string{fmt.Sprintf("unknown body %T", body)}
}

// aliasText replaces known ids inside free text.
func (h *harness) aliasText(s string) string {
	ids := make([]string, 0, len(h.alias))
	for id := range h.alias {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s = strings.ReplaceAll(s, id, h.alias[id])
	}
	return s
}

func (h *harness) showWorker(w operator.Worker) string {
	s := fmt.Sprintf("worker %s machine=%s label=%s state=%s tags=%v queues=%v runners=%v pending=%d running=%d",
		h.name("W", w.ID), w.MachineID, h.aliasText(w.Label), w.State, w.Tags, w.Queues, w.Capabilities.Runners, w.PendingCommands, w.Running)
	if w.KeyID != "" {
		s += " key=" + h.aliasText(w.KeyID)
	}
	if w.KeyRevoked {
		s += " key-revoked"
	}
	if u := w.Update; u != nil {
		s += fmt.Sprintf(" update=%s:%s from=%s", u.Version, u.State, u.From)
	}
	return s
}

func (h *harness) showInvocation(inv operator.Invocation) string {
	s := fmt.Sprintf("invocation %s queue=%s state=%s", h.name("I", inv.ID), inv.Queue, inv.State)
	if inv.WorkerID != "" {
		s += " worker=" + h.name("W", inv.WorkerID)
	}
	if inv.Error != nil {
		s += fmt.Sprintf(" error=%s:%q", inv.Error.TypeName, h.aliasText(inv.Error.Message))
	}
	if len(inv.ResultBlob) > 0 {
		s += fmt.Sprintf(" result=%q", inv.ResultBlob)
	}
	if inv.StdoutTail != "" {
		s += fmt.Sprintf(" tail=%q", inv.StdoutTail)
	}
	return s
}

func (h *harness) showCommand(c wire.Command) string {
	switch d := wire.Dispatch(c).(type) {
	case wire.ExecCommand:
		s := fmt.Sprintf("exec %s exec_id=%s command=%q", h.name("C", c.ID), h.name("X", d.Body.ExecID), d.Body.Command)
		if d.Body.Log != nil {
			s += " stdout_url=" + h.aliasText(d.Body.Log.StdoutURL)
		}
		return s + showPayload(d.Body.PayloadInline, d.Body.PayloadRef)
	case wire.SetupCommand:
		return fmt.Sprintf("setup %s script=%q refresh=%v sudo=%v", h.name("C", c.ID), d.Body.Script, d.Body.RefreshCapabilities, d.Body.Sudo)
	case wire.HibernateCommand:
		return fmt.Sprintf("hibernate %s until=%s", h.name("C", c.ID), h.rel(time.Unix(int64(d.Body.UntilEpochS), 0)))
	case wire.CancelCommand:
		id := h.name("I", d.Body.InvocationID)
		if d.Body.ExecID != "" {
			id = h.name("X", d.Body.ExecID)
		}
		return fmt.Sprintf("cancel %s %s reason=%q", h.name("C", c.ID), id, d.Body.Reason)
	case wire.RunCommand:
		return fmt.Sprintf("run %s invocation=%s fn=%s runner=%q", h.name("C", c.ID), h.name("I", d.Body.InvocationID), d.Body.Function.Qualname, d.Body.RunConfig.Runner) +
			showArgs(d.Body.ArgsBlob) + showPayload(nil, d.Body.PayloadRef)
	case wire.OTAUpdateCommand:
		return fmt.Sprintf("ota_update %s version=%s", h.name("C", c.ID), d.Body.Version)
	case wire.ResetBackoffCommand, wire.RotateKeyCommand:
		return fmt.Sprintf("%s %s", c.Kind, h.name("C", c.ID))
	case wire.Unknown:
		return fmt.Sprintf("UNKNOWN %s %s: %s", c.Kind, c.ID, d.Reason)
	}
	return "?"
}

// storedOpts compares snapshots as sets; LastSeen is persisted lazily.
var storedOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmpopts.IgnoreFields(plane.WorkerRecord{}, "LastSeen"),
	cmpopts.SortSlices(func(a, b plane.WorkerRecord) bool { return a.ID < b.ID }),
	cmpopts.SortSlices(func(a, b plane.CommandRecord) bool { return a.ID < b.ID }),
	cmpopts.SortSlices(func(a, b plane.InvocationRecord) bool { return a.ID < b.ID }),
	cmpopts.SortSlices(func(a, b plane.ExecRecord) bool { return a.ExecID < b.ExecID }),
	cmpopts.SortSlices(func(a, b plane.TokenRecord) bool { return a.ID < b.ID }),
}
