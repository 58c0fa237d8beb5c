package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nymphd/nymph/cmd/nymph/internal/doctor"
	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/hostprobe"
	"github.com/nymphd/nymph/relay"
	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// runDoctor is `nymph doctor`: the checks of a daemon host, on the
// configuration the daemon would run on (the same lookup, environment
// and flags).
func runDoctor(ctx context.Context, env *cliEnv, args []string) int {
	set := flag.NewFlagSet("nymph doctor", flag.ContinueOnError)
	set.SetOutput(env.stderr)
	var flags daemonconfig.Flags
	set.StringVar(&flags.ConfigPath, "config", "", "path of udf-daemon.toml, as nymph daemon --config (default: the daemon's own lookup)")
	optional(set, &flags.Server, "server", "control plane URL to check ([server] url)")
	optional(set, &flags.CAFile, "ca-file", "CA certificate the server must be signed by ([server] ca_file; else $"+daemonconfig.CAFileEnv+")")
	optional(set, &flags.TokenFile, "token-file", "bootstrap bearer token file ([server] token_file)")
	optional(set, &flags.Workdir, "workdir", "root of invocation workdirs ([runtime] workdir)")
	asJSON := set.Bool("json", false, "print a JSON array of {name, status, reason, fix}")
	if err := set.Parse(args); err != nil {
		return flagStatus(err)
	}
	if set.NArg() > 0 {
		fmt.Fprintf(env.stderr, "nymph doctor: unexpected argument %q\n", set.Arg(0))
		return 2
	}
	cfg, config := doctorConfig(env, &flags)
	checks := []doctor.Check{{Name: "config", Run: func(context.Context) doctor.Result { return config }}}
	if cfg == nil {
		// Every check is still listed: those that need the configuration
		// say so, the programs on PATH are checked as for the defaults.
		defaults := daemonconfig.Defaults()
		files, network := daemonHostChecks(defaults, true)
		skip := func(cs []doctor.Check) []doctor.Check {
			for i := range cs {
				cs[i].Run = func(context.Context) doctor.Result {
					return doctor.Skip("the configuration does not load (see config)")
				}
			}
			return cs
		}
		checks = slices.Concat(checks, skip(files), hostToolChecks(defaults), skip(network))
		return reportDoctor(ctx, env, checks, *asJSON)
	}
	files, network := daemonHostChecks(*cfg, flags.Server != nil)
	checks = slices.Concat(checks, files, hostToolChecks(*cfg), network)
	return reportDoctor(ctx, env, checks, *asJSON)
}

// optional registers a string flag that stays nil unless given, as
// daemonconfig.Flags wants it.
func optional(set *flag.FlagSet, dst **string, name, usage string) {
	set.Func(name, usage, func(s string) error {
		*dst = &s
		return nil
	})
}

// doctorConfig loads the daemon's configuration as nymph daemon does;
// nil with the config check's failure when it does not load.
func doctorConfig(env *cliEnv, flags *daemonconfig.Flags) (*daemonconfig.Config, doctor.Result) {
	loaded, err := daemonconfig.Load(daemonconfig.Lookup{Explicit: flags.ConfigPath, Getenv: env.getenv})
	if err == nil {
		err = flags.Apply(&loaded.Config, env.getenv)
	}
	if err != nil {
		fix := "correct the file (nymph daemon --print-config shows what the daemon makes of a good one)"
		if errors.Is(err, fs.ErrNotExist) {
			fix = "name an existing file with --config, or drop --config to use the daemon's default lookup"
		}
		return nil, doctor.Fail(fix, "%v", err)
	}
	cfg := &loaded.Config
	where := "no config file (looked in " + daemonconfig.SystemPath
	if home := env.getenv("HOME"); home != "" && flags.ConfigPath == "" {
		where += " and " + filepath.Join(home, ".config", "dreamlake", "udf-daemon.toml")
	}
	where += "): the built-in defaults"
	if loaded.Path != "" {
		where = loaded.Path + " parses"
	}
	if len(loaded.Unknown) > 0 {
		return cfg, doctor.Warn("remove or correct them: nymph daemon --print-config lists every key there is",
			"%s, but the daemon ignores unknown keys: %s", where, strings.Join(loaded.Unknown, ", "))
	}
	return cfg, doctor.OK("%s", where)
}

// daemonHostChecks are the checks of a host running a daemon on cfg that
// read its configuration: its files, then the way to the control plane,
// each in the order they are reported. The control plane is checked
// directly when the daemon reaches it so, or when --server names it.
func daemonHostChecks(cfg daemonconfig.Config, serverGiven bool) (files, network []doctor.Check) {
	files = []doctor.Check{
		{Name: "token-file", Run: doctor.TokenFile("[server] token_file", cfg.Server.TokenFile,
			"no [server] token_file: the daemon sends no bearer (it signs, or the plane takes none)")},
		{Name: "identity-key", Run: doctor.IdentityKey(cfg.Identity.Enabled, cfg.Identity.KeyFile)},
		{Name: "workdir", Run: doctor.Workdir(cfg.Runtime.Workdir)},
		{Name: "instance", Run: doctor.Instance(cfg.Runtime.Workdir, "daemon state directory",
			"give this daemon another [runtime] workdir (--workdir)", "daemon")},
	}
	if cfg.Server.Transport != "direct" {
		network = append(network, doctor.Check{Name: "relay-dir", Run: func(context.Context) doctor.Result { return relayDirCheck(cfg.Server) }})
	}
	srv := doctor.Server{URL: cfg.Server.URL, CAFile: cfg.Server.CAFile,
		URLSetting: "[server] url (--server)", CASetting: "[server] ca_file (--ca-file, $" + daemonconfig.CAFileEnv + ")", Check: "server-reachable"}
	server := []doctor.Check{
		{Name: "server-reachable", Run: srv.Reachable()},
		{Name: "server-tls", Run: srv.TLS()},
		{Name: "clock-skew", Run: srv.Clock()},
		{Name: "signed-request", Run: srv.Signed(cfg.Identity.Enabled, cfg.Identity.KeyFile, cfg.Server.TokenFile)},
	}
	if cfg.Server.Transport != "direct" && !serverGiven {
		for i := range server {
			server[i].Run = func(context.Context) doctor.Result {
				return doctor.Skip("[server] transport %q: the control plane is reached through the relay at %s (run nymph relay doctor on the relay's host, or pass --server to check it from here)",
					cfg.Server.Transport, cfg.Server.RelayDir)
			}
		}
	}
	return files, append(network, server...)
}

// relayDirCheck checks a daemon's machine directory behind a relay:
// for fifo, its pairs by the relay's own rules; for spool, its spool
// directory; for both, the relay's word on its upstream beside it.
func relayDirCheck(s daemonconfig.Server) doctor.Result {
	dir := s.RelayDir
	if dir == "" {
		return doctor.Fail("set [server] relay_dir to PREFIX/<machine_id> of the relay", "[server] transport %q needs relay_dir", s.Transport)
	}
	found := ""
	switch s.Transport {
	case "fifo":
		rep, err := relay.InspectMachine(dir, false)
		switch {
		case err != nil:
			return doctor.Fail("create it with its pipes: mkfifo -m 600 "+dir+"/req.fifo "+dir+"/resp.fifo (the relay never creates pipes)", "[server] relay_dir: %v", err)
		case len(rep.Problems) > 0:
			return doctor.Fail("make each pair complete with mkfifo -m 600, and chmod o-w what every user may write (unless the relay runs with --allow-shared-writers)",
				"[server] relay_dir %s: the relay would not pump %s", dir, strings.Join(rep.Problems, "; "))
		case rep.Pairs == 0:
			return doctor.Fail("mkfifo -m 600 "+dir+"/req.fifo "+dir+"/resp.fifo (the relay never creates pipes)", "[server] relay_dir %s holds no req.fifo/resp.fifo pair", dir)
		}
		found = fmt.Sprintf("%d pairs, well-formed", rep.Pairs)
	case "spool":
		st, err := os.Stat(filepath.Join(dir, "spool"))
		if err != nil || !st.IsDir() {
			return doctor.Fail("create "+filepath.Join(dir, "spool")+" where the relay's host sees it too", "[server] relay_dir %s has no spool directory", dir)
		}
		found = "a spool directory"
	}
	up := filepath.Join(filepath.Dir(filepath.Clean(dir)), wire.RelayUpstreamFile)
	data, err := os.ReadFile(up)
	if err != nil {
		return doctor.Warn("start the relay on "+filepath.Dir(filepath.Clean(dir))+": it writes the file at start",
			"[server] relay_dir %s: %s, but no %s beside it: %v", dir, found, wire.RelayUpstreamFile, err)
	}
	ru, err := wire.ParseRelayUpstream(data)
	if err != nil {
		return doctor.Fail("restart the relay, which writes it again", "%v", err)
	}
	if strings.TrimRight(ru.Server, "/") != strings.TrimRight(s.URL, "/") {
		return doctor.Warn("set [server] url to the control plane the relay forwards to, or start the relay with --upstream "+s.URL,
			"[server] relay_dir %s: %s, but the relay forwards to %s and [server] url is %s", dir, found, ru.Server, s.URL)
	}
	return doctor.OK("[server] relay_dir %s: %s; the relay forwards to %s", dir, found, ru.Server)
}

// hostToolChecks are the programs the daemon and its runners use. bash
// runs every exec; the others matter as far as cfg's runners and entry
// program need them.
func hostToolChecks(cfg daemonconfig.Config) []doctor.Check {
	vs := &doctor.Versions{Run: hostprobe.System(Version).Run, Timeout: hostprobe.DefaultTimeout}
	runner := func(kinds ...string) string {
		for _, k := range kinds {
			if slices.Contains(cfg.Runtime.Runners, k) {
				return "the " + k + " runner ([runtime] runners)"
			}
		}
		return ""
	}
	entry := ""
	if len(cfg.Runtime.Entry) > 0 && cfg.Runtime.Entry[0] == "python3" && slices.Contains(cfg.Runtime.Runners, runners.KindProcess) {
		entry = "the process runner's entry program ([runtime] entry)"
	}
	tools := []doctor.Tool{
		{Name: "bash", Required: true, Version: doctor.FirstLine([]string{"--version"}, "version ")},
		{Name: "python3", NeededBy: entry, Version: vs.Python},
		{Name: "docker", NeededBy: runner(wire.RunnerDocker, wire.RunnerGVisor), Version: vs.Docker,
			NoVersion: "`docker version` reached no docker server", NoVersionFix: "start the docker daemon, or set DOCKER_HOST to where it listens"},
		{Name: "runsc", NeededBy: runner(wire.RunnerGVisor), Version: vs.Runsc},
		{Name: "sbatch", NeededBy: runner(wire.RunnerSlurm), Version: doctor.FirstLine([]string{"--version"}, "")},
		{Name: "kubectl", NeededBy: runner(wire.RunnerKube), Version: doctor.FirstLine([]string{"version", "--client"}, "Client Version:")},
	}
	var checks []doctor.Check
	for _, t := range tools {
		checks = append(checks, doctor.Check{Name: t.Name, Timeout: 2 * hostprobe.DefaultTimeout, Run: doctor.ToolCheck(t, exec.LookPath)})
	}
	return checks
}

// runRelayDoctor is `nymph relay doctor`: the checks of a relay's host,
// with the relay's own flags and environment.
func runRelayDoctor(ctx context.Context, env *cliEnv, args []string) int {
	set := flag.NewFlagSet("nymph relay doctor", flag.ContinueOnError)
	set.SetOutput(env.stderr)
	prefix := set.String("prefix", env.getenv("NYMPH_RELAY_PREFIX"), "directory of machine directories holding the pipes (env NYMPH_RELAY_PREFIX)")
	upstream := set.String("upstream", env.getenv("NYMPH_RELAY_UPSTREAM"), "control plane base URL (env NYMPH_RELAY_UPSTREAM; default: the one PREFIX/"+wire.RelayUpstreamFile+" names)")
	tokenFile := set.String("token-file", env.getenv("NYMPH_RELAY_TOKEN_FILE"), "the relay's bearer token file (env NYMPH_RELAY_TOKEN_FILE)")
	caFile := set.String("ca-file", env.getenv(daemonconfig.CAFileEnv), "CA certificate the upstream must be signed by (env "+daemonconfig.CAFileEnv+")")
	allowShared := set.Bool("allow-shared-writers", false, "judge the prefix as a relay started with --allow-shared-writers")
	asJSON := set.Bool("json", false, "print a JSON array of {name, status, reason, fix}")
	if err := set.Parse(args); err != nil {
		return flagStatus(err)
	}
	if set.NArg() > 0 || *prefix == "" {
		fmt.Fprintln(env.stderr, "usage: nymph relay doctor --prefix DIR [--upstream URL] [--ca-file F] [--token-file F] [--json]")
		return 2
	}
	// The prefix is read once for every check that needs it, inside the
	// checks, so a prefix on a mount that hangs is a timed-out check.
	up := sync.OnceValue(func() relayUpstream { return upstreamFile(*prefix, *upstream, *caFile) })
	inspect := sync.OnceValues(func() (relay.PrefixReport, error) { return relay.InspectPrefix(*prefix, *allowShared) })
	server := func() doctor.Server {
		srv := doctor.Server{URL: *upstream, CAFile: *caFile, URLSetting: "--upstream", CASetting: "--ca-file ($" + daemonconfig.CAFileEnv + ")", Check: "upstream-reachable"}
		if p := up().parsed; srv.URL == "" && p != nil {
			srv.URL = p.Server
		}
		return srv
	}
	checks := []doctor.Check{
		{Name: "prefix", Run: func(context.Context) doctor.Result { return prefixCheck(inspect) }},
		{Name: "pairs", Run: func(context.Context) doctor.Result { return pairsCheck(inspect, *allowShared) }},
		{Name: "open-files", Run: func(context.Context) doctor.Result { return openFilesCheck(inspect, relay.FileBudget) }},
		{Name: "upstream-file", Run: func(context.Context) doctor.Result { return up().result }},
		{Name: "token-file", Run: doctor.TokenFile("--token-file", *tokenFile, "no --token-file (or NYMPH_RELAY_TOKEN_FILE) given: not checked")},
		{Name: "upstream-reachable", Run: func(ctx context.Context) doctor.Result { return server().Reachable()(ctx) }},
		{Name: "upstream-tls", Run: func(ctx context.Context) doctor.Result { return server().TLS()(ctx) }},
		{Name: "instance", Run: doctor.Instance(*prefix, "relay prefix", "give this relay another --prefix", "relay")},
	}
	return reportDoctor(ctx, env, checks, *asJSON)
}

func prefixCheck(inspect func() (relay.PrefixReport, error)) doctor.Result {
	rep, err := inspect()
	if err != nil {
		return doctor.Fail("create the prefix, or give the relay's --prefix; the user running the relay must be able to read it", "%v", err)
	}
	return doctor.OK("%s is readable: %d machine directories", rep.Path, rep.Machines)
}

// maxProblems bounds the problems one line names; the count says how
// many more there are.
const maxProblems = 5

func pairsCheck(inspect func() (relay.PrefixReport, error), allowShared bool) doctor.Result {
	rep, err := inspect()
	if err != nil {
		return doctor.Skip("the prefix cannot be read (see prefix)")
	}
	found := fmt.Sprintf("%d pairs and %d spool directories in %d machine directories", rep.Pairs, rep.Spools, rep.Machines)
	if n := len(rep.Problems); n > 0 {
		named := rep.Problems[:min(n, maxProblems)]
		more := ""
		if n > maxProblems {
			more = fmt.Sprintf("; and %d more", n-maxProblems)
		}
		fix := "make each pair complete with mkfifo -m 600 (req*.fifo and resp*.fifo side by side), and remove what is not a pair"
		if !allowShared {
			fix += "; chmod o-w what every user may write, or start the relay with --allow-shared-writers"
		}
		return doctor.Fail(fix, "%s; the relay would not pump %d: %s%s", found, n, strings.Join(named, "; "), more)
	}
	if rep.Pairs == 0 && rep.Spools == 0 {
		return doctor.Warn("mkfifo -m 600 PREFIX/<machine_id>/req.fifo PREFIX/<machine_id>/resp.fifo for each daemon (the relay never creates pipes)",
			"no pairs and no spool directories yet: no daemon can reach the relay")
	}
	return doctor.OK("%s, all well-formed", found)
}

// openFilesCheck holds the pairs present against the relay's pipe
// budget (relay.FileBudget outside tests).
func openFilesCheck(inspect func() (relay.PrefixReport, error), fileBudget func() (limit, budget int64, ok bool)) doctor.Result {
	rep, err := inspect()
	if err != nil {
		return doctor.Skip("the prefix cannot be read (see prefix)")
	}
	limit, budget, ok := fileBudget()
	if !ok {
		return doctor.OK("no open-file limit: every pair's pipes are held")
	}
	pairs := int64(rep.Pairs)
	need := relay.FileLimitFor(pairs)
	fix := fmt.Sprintf("raise the relay's open-file limit to at least %d (ulimit -n, or LimitNOFILE= in its systemd unit)", need)
	have := fmt.Sprintf("%d pairs, a pipe budget of %d of the open-file limit %d (this shell's; the relay raises its soft limit to the hard one)", pairs, budget, limit)
	switch {
	case pairs > budget:
		return doctor.Fail(fix, "%s: the request pipes alone exceed it, and pairs past it may not open (EMFILE)", have)
	case 2*pairs > budget:
		return doctor.Warn(fix, "%s: the reply pipes of %d pairs are opened per reply, so their daemons must open resp.fifo non-blocking", have, 2*pairs-budget)
	}
	return doctor.OK("%s: both pipes of every pair are held", have)
}

// relayUpstream is what PREFIX/relay-upstream.json says, and the check's
// verdict on it.
type relayUpstream struct {
	parsed *wire.RelayUpstream
	result doctor.Result
}

// upstreamFile reads PREFIX/relay-upstream.json and holds it against
// the upstream and CA file the relay is given: a running relay rewrites
// it at start, so a difference is a relay started with other flags.
func upstreamFile(prefix, upstream, caFile string) relayUpstream {
	path := filepath.Join(prefix, wire.RelayUpstreamFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return relayUpstream{result: doctor.Warn("start the relay on this prefix: it writes the file at start",
			"%s does not exist: a daemon joining behind this relay cannot check its token's pin", path)}
	case err != nil:
		return relayUpstream{result: doctor.Fail("let the relay's user read the prefix", "%v", err)}
	}
	ru, err := wire.ParseRelayUpstream(data)
	if err != nil {
		return relayUpstream{result: doctor.Fail("restart the relay, which writes it again, or remove the file", "%s: %v", path, err)}
	}
	out := relayUpstream{parsed: &ru}
	fp := ru.CAFingerprint
	if fp == "" {
		fp = "none (the system's roots, or plain http)"
	}
	if upstream != "" && strings.TrimRight(upstream, "/") != strings.TrimRight(ru.Server, "/") {
		out.result = doctor.Warn("restart the relay with the upstream you mean",
			"%s names %s, not --upstream %s: the relay last started with another upstream", path, ru.Server, upstream)
		return out
	}
	if caFile != "" && ru.CAFingerprint != "" {
		want, err := relay.CAFingerprint(caFile)
		if err != nil {
			out.result = doctor.Fail("point --ca-file at nymph serve's DATA-DIR/tls/ca.crt", "%v", err)
			return out
		}
		if want != ru.CAFingerprint {
			out.result = doctor.Warn("restart the relay with the CA file you mean",
				"%s names CA %s, but --ca-file %s is %s: the relay last started with another CA", path, ru.CAFingerprint, caFile, want)
			return out
		}
	}
	out.result = doctor.OK("%s: upstream %s, CA fingerprint %s", path, ru.Server, fp)
	return out
}

// reportDoctor runs the checks and prints their report; the exit status
// is 1 when any failed.
func reportDoctor(ctx context.Context, env *cliEnv, checks []doctor.Check, asJSON bool) int {
	// main routes SIGINT and SIGTERM to env.signals: the first one ends
	// the checks still running, and what they found is still printed.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case sig := <-env.signals:
			cancel(fmt.Errorf("doctor was interrupted (%s)", sig))
		case <-ctx.Done():
		}
	}()
	results := doctor.Run(ctx, checks, doctor.Options{})
	write := doctor.WriteText
	if asJSON {
		write = doctor.WriteJSON
	}
	if err := write(env.stdout, results); err != nil {
		fmt.Fprintf(env.stderr, "nymph doctor: %v\n", err)
		return 1
	}
	return doctor.ExitCode(results)
}
