package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nymphd/nymph/hostio/blobstore"
	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/hostio/sqlstore"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
)

// adminTokenFile is where serve keeps a generated admin token.
const adminTokenFile = "admin.token"

func runServe(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) > 0 && args[0] == "status" {
		return runServeStatus(env, args[1:])
	}
	flags := flag.NewFlagSet("nymph serve", flag.ContinueOnError)
	flags.SetOutput(env.stderr)
	listen := flags.String("listen", wire.DefaultListen, "address to listen on")
	dataDir := flags.String("data-dir", "", "directory of the database, blobs and generated tokens, mode 0700 (required; created when absent)")
	tokenFile := flags.String("token-file", "", "file holding the daemons' bootstrap bearer, mode 0600 (default: daemons need none)")
	relayTokenFile := flags.String("relay-token-file", "", "file holding the token relays present, mode 0600 (default: the daemon token)")
	adminFile := flags.String("admin-token-file", "", "file holding the operator API's bearer, mode 0600, a token no daemon or relay holds (default: DATA-DIR/admin.token, generated when absent)")
	storeKind := flags.String("store", "sqlite", `record store: "sqlite" (DATA-DIR/nymph.db) or "memory" (lost on exit)`)
	publicURL := flags.String("public-url", "", "base URL daemons reach this server at, for presigned payload URLs and the stdout_url of streamed execs (default: https://LISTEN)")
	var sans []string
	flags.Func("san", "a host name or IP clients dial this server by, added to its TLS certificate (repeatable; the --listen and --public-url hosts and loopback are always in it)", func(v string) error {
		sans = append(sans, v)
		return nil
	})
	insecureHTTP := flags.Bool("insecure-http", false, "serve plain HTTP instead of TLS; only on a loopback --listen")
	requireSigs := flags.Bool("require-signatures", false, "refuse every unsigned daemon request, bearer or not: turn it on once every host joined with a token")
	trustRelays := flags.Bool("trust-relay-daemons", false, "accept a daemon request that carries a valid relay token and no daemon bearer (a relay frame without headers, as daemons of protocol \"1\" write) as that of a daemon holding the bearer")
	target := flags.String("target-version", "", "nymph version every daemon should run (sent as target_nymph_version)")
	autoEvery := flags.Duration("auto-update-interval", planeserver.DefaultAutoUpdateEvery, "with --target-version and --releases, how often at most a worker on another version is sent an ota_update")
	releases := flags.String("releases", "", "directory of nymph-{os}-{arch}-{version} binaries and their SHA256SUMS (make release's dist/), served on /v1/releases/ for nymph ctl update")
	retain := flags.Duration("retain", 24*time.Hour, "how long finished execs (with their logs) and invocations are kept; 0 keeps them forever")
	verbose := flags.Bool("v", false, "log every request-level decision at debug level")
	maxWorkers := flags.Int("max-workers", plane.DefaultMaxWorkers, "how many workers (lost ones included) serve registers; the hello of a new machine past it is refused 503 with Retry-After")
	lostAfter := flags.Duration("lost-after", plane.DefaultLostAfter, "how long a worker may go without polling before it is lost and its runs are failed")
	forgetLost := flags.Duration("forget-lost-after", 0, "forget a worker lost for this long (its record and undelivered commands; its machine's next hello registers it afresh), as nymph ctl forget does; 0 keeps lost workers")
	maxLargeBodies := flags.Int("max-large-bodies", wire.DefaultMaxLargeBodies, "how many request bodies over 1 MiB are read and held at once (each may cost its route's limit, 16 MiB for an ack); one more waits for a slot, then is refused 503 with Retry-After")
	insecureOpen := flags.Bool("insecure-no-daemon-auth", false, "serve daemon routes without a bearer on a --listen address that is not loopback: anyone who reaches it can register a daemon and take its commands")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *retain < 0 {
		fmt.Fprintf(env.stderr, "nymph serve: --retain %v: must not be negative\n", *retain)
		return 2
	}
	if *lostAfter <= 0 {
		// The plane would take zero for its default: say so rather than
		// run with a window the operator did not ask for.
		fmt.Fprintf(env.stderr, "nymph serve: --lost-after %v: must be positive (default %v)\n", *lostAfter, plane.DefaultLostAfter)
		return 2
	}
	if *forgetLost < 0 {
		fmt.Fprintf(env.stderr, "nymph serve: --forget-lost-after %v: must not be negative (0 keeps lost workers)\n", *forgetLost)
		return 2
	}
	if *maxWorkers < 1 {
		fmt.Fprintf(env.stderr, "nymph serve: --max-workers %d: must be at least 1\n", *maxWorkers)
		return 2
	}
	if *maxLargeBodies < 1 {
		fmt.Fprintf(env.stderr, "nymph serve: --max-large-bodies %d: must be at least 1\n", *maxLargeBodies)
		return 2
	}
	if *insecureHTTP && !listenIsLoopback(*listen) {
		fmt.Fprintln(env.stderr, "nymph serve: "+plainListenRefusal(*listen))
		return 2
	}
	// With --require-signatures nothing unsigned is taken, so no bearer is
	// needed: every host joins with a token.
	if *tokenFile == "" && !*insecureOpen && !*requireSigs && !listenIsLoopback(*listen) {
		fmt.Fprintln(env.stderr, "nymph serve: "+openListenRefusal(*listen))
		return 2
	}
	if *dataDir == "" || flags.NArg() > 0 {
		fmt.Fprintln(env.stderr, "usage: nymph serve --data-dir DIR [--listen ADDR] [--san HOST]... [--insecure-http] [--token-file F] [--admin-token-file F] [--store sqlite|memory]")
		fmt.Fprintln(env.stderr, "       nymph serve status --data-dir DIR")
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: level}))
	if err := serve(ctx, env, log, serveOptions{
		listen: *listen, dataDir: *dataDir, tokenFile: *tokenFile, relayTokenFile: *relayTokenFile,
		adminFile: *adminFile, store: *storeKind, publicURL: *publicURL, target: *target, retain: *retain, releases: *releases, autoUpdateEvery: *autoEvery,
		trustRelayDaemons: *trustRelays, maxWorkers: *maxWorkers, maxLargeBodies: *maxLargeBodies, insecureOpen: *insecureOpen,
		lostAfter: *lostAfter, forgetLostAfter: *forgetLost,
		sans: sans, insecureHTTP: *insecureHTTP, requireSignatures: *requireSigs,
	}); err != nil {
		fmt.Fprintf(env.stderr, "nymph serve: %v\n", err)
		return 1
	}
	return 0
}

type serveOptions struct {
	listen, dataDir, tokenFile, relayTokenFile, adminFile, store, publicURL, target string
	// releases is planeserver.Config.Releases, autoUpdateEvery its
	// AutoUpdateEvery.
	releases          string
	autoUpdateEvery   time.Duration
	retain            time.Duration
	trustRelayDaemons bool
	// lostAfter and forgetLostAfter are plane.Config.LostAfter and
	// ForgetLostAfter.
	lostAfter, forgetLostAfter time.Duration
	// maxWorkers is plane.Config.MaxWorkers, maxLargeBodies
	// planeserver.Config.MaxLargeBodies; insecureOpen allows daemon routes
	// without a bearer on an address other hosts reach.
	maxWorkers, maxLargeBodies int
	insecureOpen               bool
	// sans are the --san names for the TLS certificate; insecureHTTP
	// serves plain HTTP (loopback only) instead.
	sans         []string
	insecureHTTP bool
	// requireSignatures is planeserver.Config.RequireSignatures.
	requireSignatures bool
}

// listenIsLoopback reports whether a --listen address is reachable from
// this host only: a loopback IP, or "localhost". An empty host or an
// all-interfaces address is not.
func listenIsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// openListenRefusal is why serve will not open daemon routes without a
// bearer on addr, and the two ways on.
func openListenRefusal(addr string) string {
	return fmt.Sprintf("--listen %s is not a loopback address and no --token-file is given: any host that reaches it could register as a daemon and take its commands; "+
		"join hosts with tokens and pass --require-signatures, give daemons a bearer with --token-file FILE, or pass --insecure-no-daemon-auth to serve them without one on purpose", addr)
}

// plainListenRefusal is why serve will not speak plain HTTP on addr.
func plainListenRefusal(addr string) string {
	return fmt.Sprintf("--insecure-http: --listen %s is not a loopback address: tokens and commands would cross the network in clear; drop --insecure-http (serve speaks TLS with its own CA, DATA-DIR/tls/ca.crt) or listen on 127.0.0.1", addr)
}

// tlsDir is where serve keeps its CA and server certificate.
func tlsDir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// certNames are the names serve's certificate must hold: the --listen
// host (this host's name instead when it listens on every interface, if a
// certificate can name it), the --public-url host and every --san; tlsca
// adds loopback.
func certNames(listen, publicURL string, sans []string) []string {
	var names []string
	if host, _, err := net.SplitHostPort(listen); err == nil {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			if h, err := os.Hostname(); err == nil && tlsca.ValidName(h) {
				names = append(names, h)
			}
		} else {
			names = append(names, host)
		}
	}
	if u, err := url.Parse(publicURL); err == nil && u.Hostname() != "" {
		names = append(names, u.Hostname())
	}
	return append(names, sans...)
}

func serve(ctx context.Context, env *cliEnv, log *slog.Logger, o serveOptions) error {
	daemonTok, err := optionalToken("--token-file", o.tokenFile)
	if err != nil {
		return err
	}
	relayTok, err := optionalToken("--relay-token-file", o.relayTokenFile)
	if err != nil {
		return err
	}
	if err := secretfile.EnsureDir("data directory", o.dataDir); err != nil {
		return err
	}
	adminPath := o.adminFile
	if adminPath == "" {
		adminPath = filepath.Join(o.dataDir, adminTokenFile)
	}
	adminTok, created, err := adminToken(adminPath)
	if err != nil {
		return err
	}
	if err := distinctAdminToken(adminTok, adminPath, daemonTok, o.tokenFile, relayTok, o.relayTokenFile); err != nil {
		return err
	}
	var authority *tlsca.Authority
	if !o.insecureHTTP {
		if authority, err = tlsca.Ensure(tlsDir(o.dataDir), certNames(o.listen, o.publicURL, o.sans), time.Now()); err != nil {
			return err
		}
	}
	store, err := openStore(ctx, o.store, o.dataDir, log)
	if err != nil {
		return err
	}
	defer store.Close()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.listen, err)
	}
	// "localhost" passed the checks on the flag; what it resolved to is
	// what counts.
	a, ok := ln.Addr().(*net.TCPAddr)
	resolvedLoopback := ok && a.IP.IsLoopback()
	switch {
	case daemonTok == "" && !o.insecureOpen && !o.requireSignatures && !resolvedLoopback:
		ln.Close()
		return errors.New(openListenRefusal(ln.Addr().String()))
	case o.insecureHTTP && !resolvedLoopback:
		ln.Close()
		return errors.New(plainListenRefusal(ln.Addr().String()))
	}
	scheme := "http"
	if authority != nil {
		scheme = "https"
		ln = tls.NewListener(ln, authority.ServerConfig())
	}
	base := o.publicURL
	if base == "" {
		base = scheme + "://" + ln.Addr().String()
	} else if authority != nil && strings.HasPrefix(base, "http://") {
		log.Warn("--public-url is plain http but serve speaks TLS: the URLs it hands daemons (log chunks, payloads) will not reach it unless something in front terminates TLS", "public_url", base)
	}
	blobs, err := blobstore.Open(o.dataDir, base, blobstore.Options{Log: log})
	if err != nil {
		ln.Close()
		return err
	}
	defer blobs.Close()

	var caFingerprint string // no TLS, no CA for a join token to pin
	var audiences []string
	if authority != nil {
		caFingerprint = authority.Fingerprint()
		audiences = certificateOrigins(base, authority.Names())
	}
	srv, err := planeserver.New(ctx, planeserver.Config{
		Store: store, Blobs: blobs,
		DaemonToken: daemonTok, RelayToken: relayTok, AdminToken: adminTok,
		PublicURL: base, TrustRelayDaemons: o.trustRelayDaemons, MaxLargeBodies: o.maxLargeBodies, CAFingerprint: caFingerprint,
		RequireSignatures: o.requireSignatures, OtherAudiences: audiences, Releases: o.releases, AutoUpdateEvery: o.autoUpdateEvery,
		Plane: plane.Config{Entropy: rand.Reader, TargetVersion: o.target, Retain: o.retain, MaxWorkers: o.maxWorkers,
			LostAfter: o.lostAfter, ForgetLostAfter: o.forgetLostAfter},
		Log: log,
	})
	if err != nil {
		ln.Close()
		return err
	}
	if created {
		fmt.Fprintf(env.stdout, "nymph serve: generated an admin token in %s\n", adminPath)
	} else {
		fmt.Fprintf(env.stdout, "nymph serve: admin token from %s\n", adminPath)
	}
	switch {
	case o.requireSignatures:
		fmt.Fprintln(env.stdout, "nymph serve: --require-signatures: daemon requests must be signed by a key joined with a token (nymph ctl token); no bearer is accepted alone")
	case daemonTok == "" && o.insecureOpen && !listenIsLoopback(ln.Addr().String()):
		fmt.Fprintf(env.stdout, "nymph serve: --insecure-no-daemon-auth: daemon routes on %s accept requests without a bearer from any host that reaches them\n", o.listen)
	case daemonTok == "":
		fmt.Fprintln(env.stdout, "nymph serve: no --token-file: daemon routes accept requests without a bearer (loopback only)")
	}
	if authority == nil {
		fmt.Fprintln(env.stdout, "nymph serve: --insecure-http: plain HTTP (loopback only)")
	} else {
		reportTLS(env.stdout, log, authority)
	}
	fmt.Fprintf(env.stdout, "nymph serve: listening on %s://%s (store: %s, data: %s)\n", scheme, ln.Addr(), o.store, o.dataDir)

	systemd := newAnnouncer(env.getenv, "serve", log)
	ctx, cancel := untilSignal(ctx, env, func() {
		log.Info("stopping")
		systemd.stopping()
	})
	defer cancel()
	// The listener is bound: connections from here on are queued for Serve.
	systemd.ready()
	return srv.Serve(ctx, ln, 5*time.Second)
}

// runServeStatus prints what a client needs to trust a serve, from its
// data directory alone: serve need not be running.
func runServeStatus(env *cliEnv, args []string) int {
	flags := flag.NewFlagSet("nymph serve status", flag.ContinueOnError)
	flags.SetOutput(env.stderr)
	dataDir := flags.String("data-dir", "", "serve's data directory (required)")
	if err := flags.Parse(args); err != nil {
		return flagStatus(err)
	}
	if *dataDir == "" || flags.NArg() > 0 {
		fmt.Fprintln(env.stderr, "usage: nymph serve status --data-dir DIR")
		return 2
	}
	a, err := tlsca.Load(tlsDir(*dataDir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w (serve makes its CA at its first start without --insecure-http)", err)
		}
		fmt.Fprintf(env.stderr, "nymph serve status: %v\n", err)
		return 1
	}
	ca, leaf := a.CA(), a.Leaf()
	day := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	for _, row := range [][2]string{
		{"ca_file", a.CAPath()},
		{"ca_fingerprint", a.Fingerprint()},
		{"ca_not_after", day(ca.NotAfter)},
		{"server_names", strings.Join(a.Names(), ", ")},
		{"server_not_after", fmt.Sprintf("%s (re-issued at a start of serve from %s)", day(leaf.NotAfter), day(leaf.NotAfter.Add(-tlsca.RenewBefore)))},
	} {
		fmt.Fprintf(env.stdout, "%-17s %s\n", row[0]+":", row[1])
	}
	return 0
}

// reportTLS says, at start, which CA clients must trust and what changed.
func reportTLS(w io.Writer, log *slog.Logger, a *tlsca.Authority) {
	leaf := a.Leaf()
	log.Info("tls", "ca_file", a.CAPath(), "ca_fingerprint", a.Fingerprint(), "names", a.Names(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	if a.CreatedCA() {
		fmt.Fprintf(w, "nymph serve: created a CA in %s\n", a.Dir())
	}
	if why := a.Issued(); why != "" {
		fmt.Fprintf(w, "nymph serve: issued a server certificate for %s (%s)\n", strings.Join(a.Names(), ", "), why)
	}
	fmt.Fprintf(w, "nymph serve: TLS CA %s, fingerprint %s; clients pass it as --ca-file (or NYMPH_CA_FILE)\n", a.CAPath(), a.Fingerprint())
}

func openStore(ctx context.Context, kind, dataDir string, log *slog.Logger) (planeserver.Store, error) {
	switch kind {
	case "sqlite":
		return sqlstore.Open(ctx, dataDir, log)
	case "memory":
		return planeserver.NewMemStore(), nil
	}
	return nil, fmt.Errorf("--store %q: want sqlite or memory", kind)
}

// optionalToken reads a token file (secretfile's rule); no file named
// means no token.
func optionalToken(flagName, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	tok, err := secretfile.ReadToken(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	return tok, nil
}

// distinctAdminToken refuses an admin token that a daemon or a relay also
// holds: with it, any daemon could list and command every worker.
func distinctAdminToken(admin, adminPath, daemon, daemonPath, relay, relayPath string) error {
	for _, other := range []struct{ tok, flag, path string }{
		{daemon, "--token-file", daemonPath},
		{relay, "--relay-token-file", relayPath},
	} {
		if other.tok != "" && other.tok == admin {
			return fmt.Errorf("the admin token (%s) is also the token of %s %s: a daemon holding it could list and command every worker; give the operator API a token of its own (remove %s to generate one)",
				adminPath, other.flag, other.path, adminPath)
		}
	}
	return nil
}

// adminToken reads the admin token, generating it (0600) when the file
// does not exist.
func adminToken(path string) (tok string, created bool, err error) {
	tok, err = secretfile.ReadToken(path)
	if err == nil {
		return tok, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", false, fmt.Errorf("generate admin token: %w", err)
	}
	tok = hex.EncodeToString(raw[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("write admin token: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("write admin token %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("write admin token %s: %w", path, err)
	}
	return tok, true, nil
}

// certificateOrigins are the origins a daemon may reach serve at besides
// its public URL, and so sign for: every name its certificate carries, at
// the public URL's scheme and port. A signature for another name of the
// same server is not one for another control plane.
func certificateOrigins(publicURL string, names []string) []string {
	u, err := url.Parse(publicURL)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		host := n
		switch {
		case u.Port() != "":
			host = net.JoinHostPort(n, u.Port())
		case strings.Contains(n, ":"):
			host = "[" + n + "]"
		}
		out = append(out, identity.Audience(&url.URL{Scheme: u.Scheme, Host: host}))
	}
	return out
}
