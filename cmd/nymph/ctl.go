package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/opclient"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/runners/kube"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// ctlCommand is one `nymph ctl` verb.
type ctlCommand struct {
	usage   string
	summary string
	run     func(ctx context.Context, c *ctlRun, args []string) int
}

func ctlCommands() map[string]ctlCommand {
	return map[string]ctlCommand{
		"workers":     {"workers [--json]", "list workers", ctlWorkers},
		"exec":        {"exec WORKER [--timeout D] [--env K=V]... [--stdin FILE|-] [--detach] [--no-stream] -- CMD...", "run a shell command on a worker, streaming its output", ctlExec},
		"setup":       {"setup WORKER --script FILE [--sudo] [--refresh-capabilities] [--name N]", "queue a setup script", ctlSetup},
		"hibernate":   {"hibernate WORKER --until RFC3339|+DURATION", "send a worker to sleep", ctlHibernate},
		"reset":       {"reset WORKER", "reset a worker's poll backoff", ctlReset},
		"update":      {"update WORKER|--all [--version V] [--url URL --sha256 HEX] [--wait D]", "have workers replace their binary (from serve --releases unless --url)", ctlUpdate},
		"run":         {"run --runner R [--script CMD] [--arg K=V]... [--arg-json JSON] [--env K=V]... [--queue Q] [--run-config JSON|@FILE] [--args FILE] [--module M --qualname Q] [--image I] [--wait | --follow]", "queue a function invocation, or a script", ctlRunInvocation},
		"invocations": {"invocations [ID [--wait | --follow]] [--json]", "list invocations, or show one (--wait: until it ends; --follow: printing its output)", ctlInvocations},
		"config":      {"config WORKER|--all KEY=VALUE...", "set a worker's live configuration (poll.wait_max_s, poll.retry_min_s, poll.retry_max_s, runtime.max_invocations, log.level; KEY= removes one)", ctlConfig},
		"kill":        {"kill INVOCATION|EXEC [--reason R] [--wait]", "stop an invocation or an exec: queued at once, running by a cancel to its daemon", ctlKill},
		"logs":        {"logs EXEC_ID [--follow]", "print an exec's streamed output", ctlLogs},
		"wait":        {"wait WORKER [--state S] [--timeout D]", "wait until a worker is registered (and in state S)", ctlWait},
		"ca":          {"ca [--pem]", "show the CA the server was verified by (--pem: its certificate, to keep as a CA file)", ctlCA},
		"token":       {"token [--ttl 15m] [--queue Q] [--tag K=V]...", "mint a join token and print the line that joins a host with it", ctlToken},
		"tokens":      {"tokens [--json]", "list join tokens (never their secrets)", ctlTokens},
		"rotate-key":  {"rotate-key WORKER", "have a worker replace its key", ctlRotateKey},
		"revoke":      {"revoke WORKER", "revoke a worker's key: its daemon stops, and its host joins again only with a new token", ctlRevoke},
		"forget":      {"forget WORKER... | --all-lost", "forget lost workers: their records and undelivered commands go (serve --forget-lost-after does it on its own)", ctlForget},
	}
}

// proceed is the status the argument helpers return when the verb should
// carry on; any other value (0 or more) is the exit status to stop with.
const proceed = -1

// ctlRun is what every verb shares: the environment and the connection
// flags given before the verb, which a verb's own flags may override.
type ctlRun struct {
	env    *cliEnv
	conn   ctlConn
	client *opclient.Client
}

// ctlConn holds the connection flags every verb accepts.
type ctlConn struct {
	server, token, tokenFile, caFile string
}

func (cc *ctlConn) register(fs *flag.FlagSet, def ctlConn) {
	fs.StringVar(&cc.server, "server", def.server, "control plane base URL (env NYMPH_SERVER)")
	fs.StringVar(&cc.token, "admin-token", def.token, "admin bearer token (env NYMPH_ADMIN_TOKEN)")
	fs.StringVar(&cc.tokenFile, "admin-token-file", def.tokenFile, "file holding the admin token, mode 0600 (env NYMPH_ADMIN_TOKEN_FILE)")
	fs.StringVar(&cc.caFile, "ca-file", def.caFile, "CA certificate the server's must be signed by: nymph serve's DATA-DIR/tls/ca.crt (env "+daemonconfig.CAFileEnv+"; default: the system's roots)")
}

func connFromEnv(env *cliEnv) ctlConn {
	return ctlConn{
		server:    envOr(env, "NYMPH_SERVER", wire.DefaultServerURL),
		token:     env.getenv("NYMPH_ADMIN_TOKEN"),
		tokenFile: env.getenv("NYMPH_ADMIN_TOKEN_FILE"),
		caFile:    env.getenv(daemonconfig.CAFileEnv),
	}
}

func (cc *ctlConn) dial() (*opclient.Client, error) {
	token := cc.token
	if token == "" && cc.tokenFile != "" {
		var err error
		if token, err = secretfile.ReadToken(cc.tokenFile); err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
	}
	return opclient.NewWithCA(cc.server, token, cc.caFile)
}

func envOr(env *cliEnv, key, def string) string {
	if v := env.getenv(key); v != "" {
		return v
	}
	return def
}

// flags starts a verb's flag set with the connection flags on it.
func (c *ctlRun) flags(verb string) *flag.FlagSet {
	fs := flag.NewFlagSet("nymph ctl "+verb, flag.ContinueOnError)
	fs.SetOutput(c.env.stderr)
	def := c.conn
	c.conn.register(fs, def)
	u := ctlCommands()[verb].usage
	fs.Usage = func() {
		fmt.Fprintf(c.env.stderr, "usage: nymph ctl %s\n", u)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses a verb's arguments, letting flags and positionals
// interleave, and stops at the first positional after want of them (the
// command of exec) or at "--". It returns the positionals and the rest.
func (c *ctlRun) parse(fs *flag.FlagSet, args []string, want int) (pos, rest []string, status int) {
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, flagStatus(err)
		}
		// Parse stops at the first non-flag argument, or just after a
		// "--" it consumed: either way what follows starts positional.
		args = fs.Args()
		if len(args) == 0 || len(pos) == want {
			return pos, args, proceed
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// connect creates the client once flags are parsed.
func (c *ctlRun) connect() int {
	cl, err := c.conn.dial()
	if err != nil {
		return c.fail(err)
	}
	c.client = cl
	return proceed
}

// fail reports an error and returns ctl's status for a failed request.
func (c *ctlRun) fail(err error) int {
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(c.env.stderr, "nymph ctl: interrupted")
		return 130
	}
	termtext.Fprintf(c.env.stderr, "nymph ctl: %v\n", err)
	return opclient.ExitLocalFail
}

// usageErr reports a bad argument and returns the usage status.
func (c *ctlRun) usageErr(verb, format string, a ...any) int {
	termtext.Fprintf(c.env.stderr, "nymph ctl %s: %s\n", verb, fmt.Sprintf(format, a...))
	fmt.Fprintf(c.env.stderr, "usage: nymph ctl %s\n", ctlCommands()[verb].usage)
	return 2
}

// flagStatus maps a flag parse error to an exit status: -h is success.
func flagStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func ctlUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: nymph ctl [--server URL] [--ca-file F] [--admin-token T | --admin-token-file F] <verb> [args]")
	fmt.Fprintln(w)
	verbs := ctlCommands()
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, verbs[n].summary)
	}
}

func runCtl(ctx context.Context, env *cliEnv, args []string) int {
	c := &ctlRun{env: env}
	top := flag.NewFlagSet("nymph ctl", flag.ContinueOnError)
	top.SetOutput(env.stderr)
	top.Usage = func() { ctlUsage(env.stderr) }
	c.conn.register(top, connFromEnv(env))
	if err := top.Parse(args); err != nil {
		return flagStatus(err)
	}
	if top.NArg() == 0 {
		ctlUsage(env.stderr)
		return 2
	}
	verb, ok := ctlCommands()[top.Arg(0)]
	if !ok {
		fmt.Fprintf(env.stderr, "nymph ctl: unknown verb %q\n\n", top.Arg(0))
		ctlUsage(env.stderr)
		return 2
	}
	ctx, cancel := untilSignal(ctx, env, nil)
	defer cancel()
	return verb.run(ctx, c, top.Args()[1:])
}

// prepare parses a verb's flags, checks the count of positionals (want
// exactly; rest only when allowRest), connects, and then refuses an empty
// flag named in required. status >= 0 means stop.
func (c *ctlRun) prepare(verb string, fs *flag.FlagSet, args []string, want int, allowRest bool, required ...string) (pos, rest []string, status int) {
	pos, rest, status = c.parse(fs, args, want)
	if status >= 0 {
		return nil, nil, status
	}
	if len(pos) < want {
		return nil, nil, c.usageErr(verb, "missing argument")
	}
	if len(rest) > 0 && !allowRest {
		return nil, nil, c.usageErr(verb, "unexpected argument %q", rest[0])
	}
	if st := c.connect(); st >= 0 {
		return nil, nil, st
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			return nil, nil, c.usageErr(verb, "--%s is required", name)
		}
	}
	return pos, rest, proceed
}

// worker resolves a WORKER argument (id, machine id or label) to an id,
// and says so when the worker will not pick a command up soon.
func (c *ctlRun) worker(ctx context.Context, ref string) (string, int) {
	id, w, err := c.client.ResolveWorker(ctx, ref)
	if err != nil {
		return "", c.fail(err)
	}
	if w.State == "hibernating" || w.State == "lost" {
		termtext.Fprintf(c.env.stderr, "nymph ctl: note: worker %s is %s; the command waits until it polls again\n", w.ID, w.State)
	}
	return id, proceed
}

func ctlWorkers(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("workers")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, _, st := c.prepare("workers", fs, args, 0, false); st >= 0 {
		return st
	}
	ws, err := c.client.Workers(ctx)
	return printList(c, ws, err, *asJSON, termtext.WriteWorkers)
}

// printList prints what a listing command fetched (unless err): as JSON
// with --json, else as table writes it for now.
func printList[T any](c *ctlRun, list T, err error, asJSON bool, table func(io.Writer, T, time.Time) error) int {
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		err = termtext.WriteJSON(c.env.stdout, list)
	} else {
		err = table(c.env.stdout, list, time.Now())
	}
	if err != nil {
		return c.fail(err)
	}
	return 0
}

// kvFlag collects a repeated K=V flag (--env, --arg); a later K wins.
type kvFlag map[string]string

func (e kvFlag) String() string { return "" }

func (e kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", s)
	}
	e[k] = v
	return nil
}

// parseSeconds accepts a Go duration ("90s", "2m") or a number of seconds.
func parseSeconds(s string) (float64, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f <= 0 {
			return 0, fmt.Errorf("%q: must be positive", s)
		}
		return f, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration like 30s or a number of seconds", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: must be positive", s)
	}
	return d.Seconds(), nil
}

func ctlExec(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("exec")
	env := kvFlag{}
	fs.Var(env, "env", "set K=V in the command's environment (repeatable)")
	timeout := fs.String("timeout", "", "kill the command after this long (30s, 2m, or seconds)")
	stdinFrom := fs.String("stdin", "", "feed FILE (or - for this stdin) to the command")
	workdir := fs.String("workdir", "", "run in this directory on the worker")
	detach := fs.Bool("detach", false, "queue the exec, print its id and return (see nymph ctl logs)")
	noStream := fs.Bool("no-stream", false, "collect output on the worker (capped at 1 MiB each) and print it at the end")
	payloadFrom := fs.String("payload", "", "hand FILE (or - for stdin, up to 100 MiB) to the command as the file $"+wire.EnvPayload+" names")
	namespace := fs.String("namespace", defaultPayloadNamespace, "payload store namespace a payload over 256 KiB is uploaded to")
	pos, rest, st := c.prepare("exec", fs, args, 1, true)
	if st >= 0 {
		return st
	}
	if len(rest) == 0 {
		return c.usageErr("exec", "missing command after WORKER")
	}
	req := operator.ExecRequest{Command: strings.Join(rest, " "), Stream: !*noStream}
	if len(env) > 0 {
		req.Env = env
	}
	if *timeout != "" {
		secs, err := parseSeconds(*timeout)
		if err != nil {
			return c.usageErr("exec", "--timeout %v", err)
		}
		req.TimeoutS = &secs
	}
	if *workdir != "" {
		req.Workdir = workdir
	}
	if *stdinFrom != "" {
		data, err := readInput(c.env, *stdinFrom)
		if err != nil {
			return c.usageErr("exec", "--stdin: %v", err)
		}
		s := string(data)
		req.Stdin = &s
	}
	worker, st := c.worker(ctx, pos[0])
	if st >= 0 {
		return st
	}
	if *payloadFrom != "" {
		data, err := readInput(c.env, *payloadFrom)
		if err != nil {
			return c.usageErr("exec", "--payload: %v", err)
		}
		if req.PayloadInline, req.PayloadRef, err = c.payload(ctx, *namespace, data); err != nil {
			return c.fail(err)
		}
	}
	if *detach {
		acc, err := c.client.Exec(ctx, worker, req)
		if err != nil {
			return c.fail(err)
		}
		termtext.Fprintf(c.env.stdout, "%s\n", acc.ExecID)
		return 0
	}
	acc, out, err := c.client.RunExec(ctx, worker, req, c.env.stdout, c.env.stderr)
	if err != nil {
		if acc.ExecID != "" && errors.Is(err, context.Canceled) {
			termtext.Fprintf(c.env.stderr, "nymph ctl: stopped following exec %s; it keeps running (nymph ctl logs %s --follow)\n", acc.ExecID, acc.ExecID)
			return 130
		}
		return c.fail(err)
	}
	code, msg := opclient.ExitStatus(acc.ExecID, out.Result)
	if msg != "" {
		termtext.Fprintf(c.env.stderr, "nymph ctl: %s\n", msg)
	}
	return code
}

// defaultPayloadNamespace is the payload store namespace ctl uploads to.
const defaultPayloadNamespace = "default"

// payload sends data inline when it is small enough, and otherwise
// uploads it to the plane's payload store and names it by reference.
func (c *ctlRun) payload(ctx context.Context, ns string, data []byte) (inline []byte, ref *wire.PayloadRef, err error) {
	if len(data) <= wire.PayloadInlineThreshold {
		return data, nil, nil
	}
	r, sent, err := c.client.UploadPayload(ctx, ns, data)
	if err != nil {
		return nil, nil, err
	}
	if sent {
		termtext.Fprintf(c.env.stderr, "uploaded %d bytes to the payload store as %s/%s\n", len(data), r.Bucket, r.Key)
	} else {
		termtext.Fprintf(c.env.stderr, "the payload store holds these %d bytes already as %s/%s\n", len(data), r.Bucket, r.Key)
	}
	return nil, &r, nil
}

// readInput reads FILE, or this process's stdin for "-"; more than
// wire.PayloadMax bytes is an error.
func readInput(env *cliEnv, name string) ([]byte, error) {
	var r io.Reader = env.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, wire.PayloadMax+1))
	if err == nil && len(data) > wire.PayloadMax {
		err = fmt.Errorf("%s: over the %d-byte limit", name, wire.PayloadMax)
	}
	return data, err
}

func ctlSetup(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("setup")
	script := fs.String("script", "", "the setup script (a file, or - for stdin)")
	sudo := fs.Bool("sudo", false, "run the script as root")
	refresh := fs.Bool("refresh-capabilities", false, "re-detect the host after the script succeeds")
	name := fs.String("name", "", "a name for this setup step")
	pos, _, st := c.prepare("setup", fs, args, 1, false, "script")
	if st >= 0 {
		return st
	}
	body, err := readInput(c.env, *script)
	if err != nil {
		return c.usageErr("setup", "--script: %v", err)
	}
	worker, st := c.worker(ctx, pos[0])
	if st >= 0 {
		return st
	}
	acc, err := c.client.Setup(ctx, worker, operator.SetupRequest{
		Script: string(body), Sudo: *sudo, RefreshCapabilities: *refresh, Name: *name,
	})
	return c.accepted(acc, err, "setup")
}

// accepted prints a queued command's id.
func (c *ctlRun) accepted(acc operator.CommandAccepted, err error, what string) int {
	if err != nil {
		return c.fail(err)
	}
	termtext.Fprintf(c.env.stdout, "queued %s %s for worker %s\n", what, acc.CommandID, acc.WorkerID)
	return 0
}

// parseUntil accepts RFC 3339 or +DURATION relative to now.
func parseUntil(s string, now time.Time) (time.Time, error) {
	if rel, ok := strings.CutPrefix(s, "+"); ok {
		d, err := time.ParseDuration(rel)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%q: want +DURATION like +30s", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2026-01-02T15:04:05Z) or +DURATION", s)
	}
	return t, nil
}

func ctlHibernate(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("hibernate")
	until := fs.String("until", "", "wake at this time: RFC 3339 or +DURATION")
	pos, _, st := c.prepare("hibernate", fs, args, 1, false, "until")
	if st >= 0 {
		return st
	}
	t, err := parseUntil(*until, time.Now())
	if err != nil {
		return c.usageErr("hibernate", "--until %v", err)
	}
	req := operator.HibernateRequest{UntilEpochS: float64(t.UnixNano()) / 1e9}
	worker, st := c.worker(ctx, pos[0])
	if st >= 0 {
		return st
	}
	acc, err := c.client.Hibernate(ctx, worker, req)
	if err == nil {
		termtext.Fprintf(c.env.stdout, "worker %s hibernates until %s\n", acc.WorkerID, t.UTC().Format(time.RFC3339))
	}
	return c.accepted(acc, err, "hibernate")
}

// onlyWorker reads the arguments of a verb that takes one WORKER and no
// flags of its own, and resolves it to a worker id.
func (c *ctlRun) onlyWorker(ctx context.Context, verb string, args []string) (string, int) {
	pos, _, st := c.prepare(verb, c.flags(verb), args, 1, false)
	if st >= 0 {
		return "", st
	}
	return c.worker(ctx, pos[0])
}

func ctlReset(ctx context.Context, c *ctlRun, args []string) int {
	worker, st := c.onlyWorker(ctx, "reset", args)
	if st >= 0 {
		return st
	}
	acc, err := c.client.Reset(ctx, worker)
	return c.accepted(acc, err, "reset_backoff")
}

// checkSHA256 applies the daemon's own rule (wire.ValidSHA256) before
// anything is queued, saying which half of it failed.
func checkSHA256(s string) error {
	if len(s) != 64 {
		return fmt.Errorf("%q: want 64 hex characters, got %d", s, len(s))
	}
	if !wire.ValidSHA256(s) {
		return fmt.Errorf("%q: not hex", s)
	}
	return nil
}

func ctlRunInvocation(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("run")
	queue := fs.String("queue", "default", "queue to put the invocation on")
	runner := fs.String("runner", "", "runner kind: process, docker, gvisor, slurm, kube")
	script := fs.String("script", "", "run bash -c `CMD` instead of the entry program (in the workdir; /workspace in a container or Pod); it succeeds when it exits 0")
	argsFile := fs.String("args", "", "file (or -) whose bytes become args.msgpack (over 256 KiB: uploaded to the payload store)")
	argKV := kvFlag{}
	fs.Var(argKV, "arg", "set `K=V` in args.msgpack, a msgpack map of strings (repeatable; not with --args)")
	argJSON := fs.String("arg-json", "", "args.msgpack as a msgpack map from a `JSON` object, or @FILE (- for stdin); --arg sets keys on top (not with --args)")
	env := kvFlag{}
	fs.Var(env, "env", "set `K=V` in the run's environment (repeatable): run_config.docker.env on docker and gvisor; on the other runners only with --script, exported before it")
	namespace := fs.String("namespace", defaultPayloadNamespace, "payload store namespace args.msgpack over 256 KiB is uploaded to")
	module := fs.String("module", "", "function module (default __main__; none with --script)")
	qualname := fs.String("qualname", "", "function qualified name (default main; none with --script)")
	image := fs.String("image", "", "container image: required by docker and gvisor, "+kube.DefaultImage+" by default on kube; the host runners (process, slurm) take none")
	runConfig := fs.String("run-config", "", "run_config as JSON, or @FILE (- for stdin); --runner and --image override its keys")
	var tags stringList
	fs.Var(&tags, "require-tag", "only a worker with this k=v tag may take it (repeatable)")
	wait := fs.Bool("wait", false, "wait until the invocation ends and say how (a script: its exit status); exit 0 only if it succeeded")
	follow := fs.Bool("follow", false, followHelp+"; then as --wait")
	asJSON := fs.Bool("json", false, "print the invocation as JSON")
	if _, _, st := c.prepare("run", fs, args, 0, false); st >= 0 {
		return st
	}
	if *follow && *asJSON {
		return c.usageErr("run", "--follow prints the output as it comes: not with --json (--wait --json)")
	}
	hasScript := flagGiven(fs, "script")
	if hasScript && strings.TrimSpace(*script) == "" {
		return c.usageErr("run", "--script needs a command")
	}
	rc, err := parseRunConfig(c.env, *runConfig)
	if err != nil {
		return c.usageErr("run", "--run-config: %v", err)
	}
	if *runner != "" {
		rc.Runner = *runner
	}
	if *image != "" {
		rc.Image = *image
	}
	if rc.Runner == "" {
		return c.usageErr("run", "--runner (or run_config.runner) is required")
	}
	if len(env) > 0 {
		kind, _ := wire.RunnerKind(rc.Runner)
		if st := c.runEnv(&rc, kind, hasScript, script, env); st >= 0 {
			return st
		}
	}
	req := operator.RunRequest{
		Queue:        *queue,
		Function:     runFunction(hasScript, *module, *qualname),
		RunConfig:    rc,
		RequiredTags: tags,
	}
	if hasScript {
		req.Script = script
	}
	var data []byte
	switch {
	case *argsFile != "" && (len(argKV) > 0 || *argJSON != ""):
		return c.usageErr("run", "--args gives args.msgpack whole: not with --arg or --arg-json")
	case *argsFile != "":
		if data, err = readInput(c.env, *argsFile); err != nil {
			return c.usageErr("run", "--args: %v", err)
		}
	case len(argKV) > 0 || *argJSON != "":
		if data, err = buildRunArgs(c.env, *argJSON, argKV); err != nil {
			return c.usageErr("run", "%v", err)
		}
	}
	if data != nil {
		if req.ArgsBlob, req.PayloadRef, err = c.payload(ctx, *namespace, data); err != nil {
			return c.fail(err)
		}
	}
	inv, err := c.client.Run(ctx, req)
	if err != nil {
		return c.fail(err)
	}
	switch {
	case *follow:
		termtext.Fprintf(c.env.stderr, "queued invocation %s on %s; following its output (refreshed at each poll of its daemon)\n", inv.ID, inv.Queue)
		inv, err = c.client.FollowInvocation(ctx, inv.ID, opclient.FollowEvery, c.env.stdout)
	case *wait:
		termtext.Fprintf(c.env.stderr, "queued invocation %s on %s; waiting\n", inv.ID, inv.Queue)
		inv, err = c.client.WaitInvocation(ctx, inv.ID)
	default:
		return c.printInvocation(inv, *asJSON)
	}
	if err != nil {
		return c.fail(err)
	}
	if st := c.printInvocation(inv, *asJSON); st != 0 {
		return st
	}
	if !*asJSON {
		printRunEnd(c.env.stdout, inv, hasScript)
	}
	if inv.State != wire.StateSucceeded {
		return 1
	}
	return 0
}

// followHelp says what --follow of run and invocations prints, and how
// fresh it is.
const followHelp = "print the run's output (stdout and stderr, the last 4 KiB its daemon reports) as it arrives: " +
	"refreshed at each poll of its daemon, at most every [poll] wait_max_s (20 s by default) or sooner when commands come; " +
	"output after its daemon's last poll before the end is only in the daemon log"

// parseRunConfig reads --run-config: inline JSON, or @FILE (@- for
// stdin). Unknown keys are refused by name, so a typo never silently
// falls back to a default.
func parseRunConfig(env *cliEnv, arg string) (wire.RunConfig, error) {
	var rc wire.RunConfig
	if arg == "" {
		return rc, nil
	}
	data := []byte(arg)
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		if name == "" {
			return rc, errors.New("@ needs a file name (or - for stdin)")
		}
		var err error
		if data, err = readInput(env, name); err != nil {
			return rc, err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rc); err != nil {
		return rc, fmt.Errorf("not a run_config object: %w", err)
	}
	if dec.More() {
		return rc, errors.New("trailing data after the run_config object")
	}
	return rc, nil
}

func (c *ctlRun) printInvocation(inv operator.Invocation, asJSON bool) int {
	if asJSON {
		if err := termtext.WriteJSON(c.env.stdout, inv); err != nil {
			return c.fail(err)
		}
		return 0
	}
	termtext.Fprintf(c.env.stdout, "invocation %s %s", inv.ID, inv.State)
	if inv.WorkerID != "" {
		termtext.Fprintf(c.env.stdout, " on %s", inv.WorkerID)
	}
	fmt.Fprintln(c.env.stdout)
	if e := inv.Error; e != nil {
		termtext.Fprintf(c.env.stdout, "error: %s\n", termtext.ErrorText(e))
	}
	if len(inv.ResultBlob) > 0 {
		fmt.Fprintf(c.env.stdout, "result: %d bytes\n", len(inv.ResultBlob))
	}
	return 0
}

// stringList collects a repeated string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func ctlInvocations(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("invocations")
	asJSON := fs.Bool("json", false, "print JSON")
	wait := fs.Bool("wait", false, "with ID: wait until it ends; exit 0 only if it succeeded")
	follow := fs.Bool("follow", false, "with ID: "+followHelp+"; then as --wait")
	pos, rest, st := c.parse(fs, args, 1)
	if st >= 0 {
		return st
	}
	if len(rest) > 0 {
		return c.usageErr("invocations", "unexpected argument %q", rest[0])
	}
	if *wait && len(pos) == 0 {
		return c.usageErr("invocations", "--wait needs an invocation ID")
	}
	if *follow && len(pos) == 0 {
		return c.usageErr("invocations", "--follow needs an invocation ID")
	}
	if *follow && *asJSON {
		return c.usageErr("invocations", "--follow prints the output as it comes: not with --json (--wait --json)")
	}
	if st := c.connect(); st >= 0 {
		return st
	}
	if *follow {
		inv, err := c.client.FollowInvocation(ctx, pos[0], opclient.FollowEvery, c.env.stdout)
		if err != nil {
			return c.fail(err)
		}
		if st := c.printInvocation(inv, false); st != 0 {
			return st
		}
		if inv.State != wire.StateSucceeded {
			return 1
		}
		return 0
	}
	if len(pos) == 1 {
		return c.showInvocation(ctx, pos[0], *wait, *asJSON)
	}
	invs, err := c.client.Invocations(ctx)
	return printList(c, invs, err, *asJSON, termtext.WriteInvocations)
}

// showInvocation prints one invocation, after waiting for its end if asked.
func (c *ctlRun) showInvocation(ctx context.Context, id string, wait, asJSON bool) int {
	var inv operator.Invocation
	var err error
	if wait {
		inv, err = c.client.WaitInvocation(ctx, id)
	} else {
		inv, err = c.client.Invocation(ctx, id)
	}
	if err != nil {
		return c.fail(err)
	}
	if st := c.printInvocation(inv, asJSON); st != 0 {
		return st
	}
	if wait && inv.State != wire.StateSucceeded {
		return 1
	}
	return 0
}

func ctlLogs(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("logs")
	follow := fs.Bool("follow", false, "keep printing until the exec finishes")
	fs.BoolVar(follow, "f", false, "short for --follow")
	pos, _, st := c.prepare("logs", fs, args, 1, false)
	if st >= 0 {
		return st
	}
	var n int64
	var err error
	if *follow {
		n, err = c.client.FollowLogs(ctx, pos[0], 0, c.env.stdout)
	} else {
		var page operator.LogsPage
		page, err = c.client.DumpLogs(ctx, pos[0], c.env.stdout)
		n = page.NextOffset
	}
	if err != nil {
		return c.fail(err)
	}
	if n > 0 {
		return 0
	}
	// Nothing was streamed: an exec run without streaming keeps its output
	// in the result.
	es, err := c.client.ExecStatus(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	if es.Result != nil {
		io.WriteString(c.env.stdout, es.Result.Stdout)
		io.WriteString(c.env.stderr, es.Result.Stderr)
	}
	return 0
}

func ctlWait(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("wait")
	state := fs.String("state", "", "wait for this state: active, setting_up, hibernating or lost")
	timeout := fs.String("timeout", "60s", "give up after this long")
	pos, _, st := c.prepare("wait", fs, args, 1, false)
	if st >= 0 {
		return st
	}
	secs, err := parseSeconds(*timeout)
	if err != nil {
		return c.usageErr("wait", "--timeout %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs*float64(time.Second)))
	defer cancel()
	var last operator.Worker
	w, err := c.client.WaitWorker(ctx, func(w operator.Worker) bool {
		if m, ok := opclient.MatchWorker([]operator.Worker{w}, pos[0]); ok {
			last = m
			return *state == "" || m.State == *state
		}
		return false
	})
	if errors.Is(err, context.DeadlineExceeded) {
		if last.ID == "" {
			termtext.Fprintf(c.env.stderr, "nymph ctl: no worker %q after %s\n", pos[0], *timeout)
		} else {
			termtext.Fprintf(c.env.stderr, "nymph ctl: worker %s is %s, not %s, after %s\n", last.ID, last.State, *state, *timeout)
		}
		return 1
	}
	if err != nil {
		return c.fail(err)
	}
	termtext.Fprintf(c.env.stdout, "worker %s is %s\n", w.ID, w.State)
	return 0
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// runFunction is the function a run names: the module and qualname given,
// defaulting to __main__.main for the entry program. A script runs instead
// of the entry program, so it names none unless asked to (the control
// plane takes a run with a script and no function.module).
func runFunction(script bool, module, qualname string) wire.Function {
	if script {
		return wire.Function{Module: module, Qualname: qualname}
	}
	return wire.Function{Module: cmp.Or(module, "__main__"), Qualname: cmp.Or(qualname, "main")}
}

// shellName is an environment variable name a shell can export.
var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// runEnv applies --env to a run. docker and gvisor have an environment in
// run_config (docker.env; --env wins over the same key there). The other
// runners have none on the wire, so only a script can take it: the
// variables are exported on the script's first line. An entry program run
// on them is refused rather than run without what was asked.
func (c *ctlRun) runEnv(rc *wire.RunConfig, kind string, hasScript bool, script *string, env kvFlag) int {
	keys := slices.Sorted(maps.Keys(env))
	if kind == wire.RunnerDocker || kind == wire.RunnerGVisor {
		if rc.Docker == nil {
			rc.Docker = &wire.DockerConfig{}
		}
		if rc.Docker.Env == nil {
			rc.Docker.Env = map[string]string{}
		}
		maps.Copy(rc.Docker.Env, env)
		return proceed
	}
	if !hasScript {
		return c.usageErr("run", "--env: run_config has no environment for the %s runner (only docker and gvisor have one); "+
			"with --script the variables are exported before it, and an entry program can read args.msgpack (--arg)", rc.Runner)
	}
	var b strings.Builder
	b.WriteString("export")
	for _, k := range keys {
		if !shellName.MatchString(k) {
			return c.usageErr("run", "--env %s: not a name a shell can export", k)
		}
		b.WriteString(" " + k + "=" + runners.ShellQuote(env[k]))
	}
	*script = b.String() + "\n" + *script
	return proceed
}

// buildRunArgs makes args.msgpack from --arg-json (a JSON object, inline
// or @FILE) and --arg K=V: a msgpack map with string keys, sorted. JSON
// values map to their msgpack kinds (a number without a fraction or
// exponent to an integer); --arg values are strings and replace a key the
// JSON has. docs/protocol.md, "Writing an entry program", describes it.
func buildRunArgs(env *cliEnv, argJSON string, kv kvFlag) ([]byte, error) {
	obj := map[string]any{}
	if argJSON != "" {
		data := []byte(argJSON)
		if name, ok := strings.CutPrefix(argJSON, "@"); ok {
			var err error
			if data, err = readInput(env, name); err != nil {
				return nil, fmt.Errorf("--arg-json: %w", err)
			}
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("--arg-json: not a JSON object: %w", err)
		}
		if dec.More() {
			return nil, errors.New("--arg-json: trailing data after the JSON object")
		}
		if obj == nil {
			return nil, errors.New("--arg-json: not a JSON object: null")
		}
	}
	for k, v := range kv {
		obj[k] = v
	}
	return appendMsgpack(nil, obj)
}

// appendMsgpack appends v, as encoding/json decodes it with UseNumber, in
// msgpack.
func appendMsgpack(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return msgp.AppendNil(b), nil
	case bool:
		return msgp.AppendBool(b, v), nil
	case string:
		return msgp.AppendString(b, v), nil
	case json.Number:
		if !strings.ContainsAny(v.String(), ".eE") {
			if i, err := v.Int64(); err == nil {
				return msgp.AppendInt64(b, i), nil
			}
		}
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("--arg-json: number %s: %w", v, err)
		}
		return msgp.AppendFloat64(b, f), nil
	case []any:
		b = msgp.AppendArrayHeader(b, uint32(len(v)))
		for _, e := range v {
			var err error
			if b, err = appendMsgpack(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]any:
		b = msgp.AppendMapHeader(b, uint32(len(v)))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			b = msgp.AppendString(b, k)
			var err error
			if b, err = appendMsgpack(b, v[k]); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("--arg-json: cannot encode %T", v)
}

// maxResultJSON bounds the result ctl run --wait prints as JSON.
const maxResultJSON = 4 << 10

// printRunEnd adds to what printInvocation said of an ended run: a
// script's exit status and where its output went, and a result that is a
// msgpack map or array as JSON.
func printRunEnd(w io.Writer, inv operator.Invocation, script bool) {
	if script {
		if inv.State == wire.StateSucceeded {
			fmt.Fprintln(w, "exit status 0")
		}
		if inv.WorkerID != "" {
			termtext.Fprintf(w, "the script's output is in the daemon log on %s\n", inv.WorkerID)
		}
	}
	if js, ok := resultJSON(inv.ResultBlob); ok {
		if len(js) > maxResultJSON {
			fmt.Fprintf(w, "result as JSON: %d bytes, not shown (--json gives the blob)\n", len(js))
			return
		}
		termtext.Fprintf(w, "result as JSON: %s\n", js)
	}
}

// resultJSON renders a result blob that is one whole msgpack map or array
// as JSON; ok is false for anything else (raw bytes, a bare scalar).
func resultJSON(blob []byte) (string, bool) {
	if len(blob) == 0 {
		return "", false
	}
	switch msgp.NextType(blob) {
	case msgp.MapType, msgp.ArrayType:
	default:
		return "", false
	}
	if rest, err := msgp.Skip(blob); err != nil || len(rest) > 0 {
		return "", false
	}
	var buf bytes.Buffer
	if _, err := msgp.UnmarshalAsJSON(&buf, blob); err != nil {
		return "", false
	}
	return buf.String(), true
}
