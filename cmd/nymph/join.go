package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/hostio/signer"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

// joinTokenEnv may carry the token instead of --token, so it stays out
// of the process list.
const joinTokenEnv = "NYMPH_JOIN_TOKEN"

// joinTimeout bounds the whole enrolment: one TLS handshake and one hello.
const joinTimeout = 2 * time.Minute

// runDaemonJoin is `nymph daemon join`: check the control plane's CA
// against the token's pin, make this host's key, enroll it with the
// token on a hello, and write the CA, the key and the config that plain
// `nymph daemon` then runs on.
func runDaemonJoin(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("nymph daemon join", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	flags := daemonconfig.Register(fs)
	tokenFlag := fs.String("token", "", "the join token `nymph ctl token` printed: <secret>.<CA fingerprint> (or $"+joinTokenEnv+")")
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.stderr, "nymph daemon join: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q", fs.Arg(0))
	}
	raw := *tokenFlag
	if raw == "" {
		raw = env.getenv(joinTokenEnv)
	}
	if raw == "" {
		return fail(2, "no token: pass --token (or $%s) as `nymph ctl token` printed it", joinTokenEnv)
	}
	tok, err := identity.ParseJoinToken(raw)
	if err != nil {
		return fail(2, "%v", err)
	}
	plan, err := planJoin(env, flags)
	if err != nil {
		return fail(2, "%v", err)
	}
	lock, err := lockStateDir(plan.cfg)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer lock.Release()
	log := newLogger(env.stderr, plan.cfg.Log)
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	res, code, err := enroll(ctx, env, plan, tok, log)
	if err != nil {
		return fail(code, "%v", err)
	}
	if err := plan.write(res); err != nil {
		return fail(1, "enrolled as worker %s, but %v; join again with a new token", res.workerID, err)
	}
	fmt.Fprintf(env.stdout, "joined %s as worker %s with key %s\n", plan.cfg.Server.URL, res.workerID, res.keyID)
	wrote := plan.configPath + " and " + plan.cfg.Identity.KeyFile
	if plan.cfg.Server.CAFile != "" {
		wrote = plan.configPath + ", " + plan.cfg.Identity.KeyFile + " and " + plan.cfg.Server.CAFile
	}
	fmt.Fprintf(env.stdout, "wrote %s; start the daemon with: nymph daemon%s\n", wrote, plan.configFlag())
	return 0
}

// joinPlan is where a join writes and the config it writes.
type joinPlan struct {
	cfg        daemonconfig.Config
	configPath string
	// explicit is true when --config named the path (so the daemon needs
	// it too).
	explicit bool
}

// planJoin settles the config a join writes: the existing one at the
// path (--config, else the first default location the daemon reads),
// the flags over it, an identity and a CA file beside it.
func planJoin(env *cliEnv, flags *daemonconfig.Flags) (*joinPlan, error) {
	p := &joinPlan{configPath: flags.ConfigPath, explicit: flags.ConfigPath != ""}
	if p.configPath == "" {
		p.configPath = defaultConfigPath(env)
	}
	// The key and CA paths written into the config must hold from any
	// working directory (a service manager starts the daemon in /).
	abs, err := filepath.Abs(p.configPath)
	if err != nil {
		return nil, fmt.Errorf("config path %s: %w", p.configPath, err)
	}
	p.configPath = abs
	lookup := daemonconfig.Lookup{Getenv: func(string) string { return "" }, SystemPath: p.configPath}
	if _, err := os.Stat(p.configPath); err == nil {
		lookup.Explicit = p.configPath
	}
	loaded, err := daemonconfig.Load(lookup)
	if err != nil {
		return nil, err
	}
	p.cfg = loaded.Config
	if err := flags.Apply(&p.cfg, env.getenv); err != nil {
		return nil, err
	}
	p.cfg.Identity.Enabled = true
	if p.cfg.Identity.KeyFile == "" {
		p.cfg.Identity.KeyFile = keyPathBeside(p.configPath)
	}
	// The CA the pin verified is kept beside the config, whatever CA file
	// the flags or environment named: the join trusts that one alone, and
	// must not overwrite a file it did not make.
	p.cfg.Server.CAFile = filepath.Join(filepath.Dir(p.configPath), tlsca.CAFile)
	return p, nil
}

// defaultConfigPath is where a join writes without --config: the system
// file for root, the user's file for anyone else — where the daemon
// looks.
func defaultConfigPath(env *cliEnv) string {
	if home := env.getenv("HOME"); home != "" && os.Geteuid() != 0 {
		return filepath.Join(home, ".config", "dreamlake", "udf-daemon.toml")
	}
	return daemonconfig.SystemPath
}

func (p *joinPlan) configFlag() string {
	if p.explicit {
		return " --config " + p.configPath
	}
	return ""
}

// joined is what an accepted enrolment hands back.
type joined struct {
	workerID, keyID string
	key             ed25519.PrivateKey
	caPEM           []byte
}

// enroll sends the enrolling hello, signed by a new key, carrying the
// token's secret. The secret leaves the host only once the pin holds: a
// direct join speaks TLS pinned to the token's fingerprint, so the
// handshake fails before any byte of the request is written unless the
// server shows the pinned CA; a join through a relay checks the CA the
// relay verifies its upstream by (wire.RelayUpstreamFile), since the
// relay holds the TLS connection.
func enroll(ctx context.Context, env *cliEnv, plan *joinPlan, tok identity.JoinToken, log *slog.Logger) (joined, int, error) {
	carrier, err := joinCarrier(plan, tok, log)
	if err != nil {
		return joined{}, 2, err
	}
	defer carrier.close()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return joined{}, 1, fmt.Errorf("generate a key: %w", err)
	}
	sign, err := signer.New(signer.Options{Next: carrier.tr, Key: key, ServerURL: plan.cfg.Server.URL, Random: rand.Reader})
	if err != nil {
		return joined{}, 2, err
	}
	body, err := enrollingHello(ctx, env, plan.cfg, sign.PublicKey(), carrier.tr.CanWithdraw(), log)
	if err != nil {
		return joined{}, 1, err
	}
	resp, err := sign.RoundTrip(ctx, &transport.Request{Endpoint: wire.PathHello, Body: body, Lane: transport.LaneControl,
		Headers: map[string]string{identity.HeaderEnrollToken: tok.Secret}})
	var pinErr *tlsca.PinError
	switch {
	case errors.As(err, &pinErr):
		return joined{}, 2, pinMismatch(pinErr.Want, strings.Join(pinErr.Got, ", "))
	case err != nil:
		return joined{}, 1, fmt.Errorf("hello to %s: %w", plan.cfg.Server.URL, err)
	}
	res, code, err := helloOutcome(resp, key)
	if err == nil && carrier.pinned != nil {
		var ok bool
		if res.caPEM, ok = carrier.pinned.CA(); !ok {
			return joined{}, 1, errors.New("the TLS handshake passed without the pinned CA (a bug)")
		}
	}
	return res, code, err
}

func pinMismatch(want, got string) error {
	return fmt.Errorf("the server's CA does not match the token; the secret was not sent\n  expected: %s\n  actual:   %s", want, got)
}

// carrier is how an enrolling hello travels.
type carrier struct {
	tr     transport.Transport
	pinned *tlsca.Pinned // nil through a relay
	close  func()
}

// joinCarrier is the transport of the enrolling hello, with the pin
// checked (through a relay) or about to be (direct).
func joinCarrier(plan *joinPlan, tok identity.JoinToken, log *slog.Logger) (*carrier, error) {
	cfg := &plan.cfg
	if cfg.Server.Transport == "direct" {
		u, err := url.Parse(cfg.Server.URL)
		if err != nil || u.Scheme != "https" {
			return nil, fmt.Errorf("server %q: a join needs an https:// URL (the token pins the server's CA)", cfg.Server.URL)
		}
		pin, err := tlsca.NewPinned(tok.Fingerprint)
		if err != nil {
			return nil, err
		}
		client, err := httpclient.New(httpclient.Options{BaseURL: cfg.Server.URL, TLS: pin.Config(u.Hostname()), Log: log})
		if err != nil {
			return nil, err
		}
		return &carrier{tr: client, pinned: pin, close: client.CloseIdle}, nil
	}
	if err := relayPin(cfg, tok); err != nil {
		return nil, err
	}
	// A relayed daemon verifies no TLS itself: no CA file.
	cfg.Server.CAFile = ""
	tr, closeTr, err := buildTransport(*cfg, log)
	if err != nil {
		return nil, err
	}
	return &carrier{tr: tr, close: closeTr}, nil
}

// relayPin checks the token's pin against the CA the relay verifies its
// upstream by, and takes the relay's upstream as the server when the
// config names none (it is the audience of every signature).
func relayPin(cfg *daemonconfig.Config, tok identity.JoinToken) error {
	if cfg.Server.RelayDir == "" {
		return fmt.Errorf("[server] transport %q needs relay_dir", cfg.Server.Transport)
	}
	path := filepath.Join(filepath.Dir(filepath.Clean(cfg.Server.RelayDir)), wire.RelayUpstreamFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the relay's upstream file (the relay writes it at start; is it running on this prefix?): %w", err)
	}
	ru, err := wire.ParseRelayUpstream(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if ru.CAFingerprint == "" {
		return fmt.Errorf("%s: the relay verifies %s by the system's roots, not a CA file, so the token's pin cannot be checked; start the relay with --ca-file", path, ru.Server)
	}
	if !identity.SameFingerprint(ru.CAFingerprint, tok.Fingerprint) {
		return pinMismatch(tok.Fingerprint, ru.CAFingerprint+" (the CA relay "+path+" verifies "+ru.Server+" by)")
	}
	if cfg.Server.URL == "" || cfg.Server.URL == wire.DefaultServerURL {
		cfg.Server.URL = ru.Server
	}
	return nil
}

// enrollingHello is the hello the daemon itself would send first, with
// the new public key: the same core builds it from the same probe.
func enrollingHello(ctx context.Context, env *cliEnv, cfg daemonconfig.Config, pub string, withdraws bool, log *slog.Logger) ([]byte, error) {
	mcfg, _ := hostMachine(ctx, env, cfg, !withdraws, log)
	mcfg.PublicKey = &pub
	for _, eff := range daemon.New(mcfg, mrand.New(mrand.NewPCG(1, 2))).Step(time.Now(), daemon.Boot{}) {
		if h, ok := eff.(daemon.SendHello); ok {
			return h.Request.MarshalMsg(nil)
		}
	}
	return nil, errors.New("the daemon core sent no hello at boot (a bug)")
}

// helloOutcome reads the control plane's answer to an enrolling hello.
func helloOutcome(resp *transport.Response, key ed25519.PrivateKey) (joined, int, error) {
	if resp.Status == 429 {
		return joined{}, 1, errors.New("the control plane is refusing enrolments from this address for now (rate limit; try again in a minute)")
	}
	if resp.Status < 200 || resp.Status > 299 {
		code, msg := wire.ErrorCode(resp.Body)
		return joined{}, 2, fmt.Errorf("hello refused: status %d %s %s", resp.Status, code, msg)
	}
	var hr wire.HelloResponse
	if _, err := hr.UnmarshalMsg(resp.Body); err != nil {
		return joined{}, 1, fmt.Errorf("hello reply: %w", err)
	}
	if hr.Reject != nil {
		return joined{}, 2, fmt.Errorf("enrolment refused: %s: %s", hr.Reject.Code, hr.Reject.Message)
	}
	want := identity.KeyID(key.Public().(ed25519.PublicKey))
	if hr.KeyID == nil || *hr.KeyID != want || hr.WorkerID == nil {
		return joined{}, 1, fmt.Errorf("the control plane answered the hello without enrolling key %s (key_id %v)", want, hr.KeyID)
	}
	return joined{workerID: *hr.WorkerID, keyID: want, key: key}, 0, nil
}

// write keeps what the join got: the key (private, atomically), the CA,
// and the config naming both.
func (p *joinPlan) write(res joined) error {
	if err := secretfile.Write(p.cfg.Identity.KeyFile, identity.EncodeSeed(res.key)); err != nil {
		return fmt.Errorf("store the key: %w", err)
	}
	if res.caPEM != nil {
		if err := writePublic(p.cfg.Server.CAFile, res.caPEM); err != nil {
			return fmt.Errorf("store the CA: %w", err)
		}
	}
	out, err := p.cfg.TOML()
	if err != nil {
		return err
	}
	if err := writePublic(p.configPath, out); err != nil {
		return fmt.Errorf("write the config: %w", err)
	}
	return nil
}

// writePublic replaces a file others may read (a CA, a config)
// atomically.
func writePublic(path string, data []byte) error {
	return secretfile.WriteFile(path, data, 0o644)
}
