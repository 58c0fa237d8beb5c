// Package devstack runs a throwaway nymph installation for `nymph dev`: a
// `nymph serve` on a temporary data directory and one `nymph daemon`
// attached to it, both children of the calling process, plus the short
// tour that shows a newcomer an exec, a streamed exec and a setup.
//
// It decides the layout of the temporary directory, the daemon's
// configuration (written as hostio/daemonconfig prints a Config), the order
// of start and stop (serve, then the daemon; stop the daemon first so it
// drains against a live server) and that children never outlive the parent
// (their own process group, a parent-death signal on Linux, and Stop on
// every exit path: hostio/procgroup). It does not decide anything the
// control plane or the daemon decides; it talks to them like a user would,
// through the operator API (hostio/opclient) and the daemon's introspection
// server (hostio/introspect).
package devstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/opclient"
	"github.com/nymphd/nymph/hostio/procgroup"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/operator"
)

// Options configure Start.
type Options struct {
	// Binary is the nymph executable to run as serve and daemon.
	Binary string
	// Dir is the parent of the temporary directory ("" = os.TempDir()).
	Dir string
	// Keep leaves the temporary directory in place after Stop.
	Keep bool
	// Log receives progress of the stack itself (not the children's logs).
	Log *slog.Logger
	// StopGrace is how long a child may take to exit after SIGTERM before
	// it is killed (default 10 s).
	StopGrace time.Duration
}

// Stack is a running serve + daemon pair.
type Stack struct {
	// Dir holds everything: data/, work/, the tokens, the config and logs.
	Dir       string
	ServerURL string
	// CAFile is serve's CA certificate (data/tls/ca.crt), which the
	// client verifies serve by; the daemon keeps the copy its join
	// pinned, beside its config.
	CAFile string
	// JoinLine is the line `nymph ctl token` printed for the daemon (its
	// token is spent by the join), and KeyID the key the daemon enrolled.
	JoinLine, KeyID string
	AdminTokenFile  string
	IntrospectURL   string
	ServeLog        string
	DaemonLog       string
	DaemonConfig    string
	// Client talks to the server with the admin token.
	Client *opclient.Client

	opt    Options
	serve  *child
	daemon *child

	exitOnce sync.Once
	exited   chan struct{}
	why      string
}

// child is one started process and the channel closed when it exits.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done is closed
}

// Start creates the temporary directory, starts serve, waits until it
// answers /healthz, then starts the daemon. On error everything started
// is stopped again.
func Start(ctx context.Context, opt Options) (_ *Stack, err error) {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.StopGrace <= 0 {
		opt.StopGrace = 10 * time.Second
	}
	dir, err := os.MkdirTemp(opt.Dir, "nymph-dev-")
	if err != nil {
		return nil, fmt.Errorf("devstack: create temp dir: %w", err)
	}
	s := &Stack{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "data", "tls", tlsca.CAFile),
		AdminTokenFile: filepath.Join(dir, "admin.token"),
		ServeLog:       filepath.Join(dir, "serve.log"),
		DaemonLog:      filepath.Join(dir, "daemon.log"),
		DaemonConfig:   filepath.Join(dir, "udf-daemon.toml"),
		opt:            opt,
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if err := s.startServe(ctx); err != nil {
		return nil, err
	}
	if err := s.startDaemon(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) startServe(ctx context.Context) error {
	admin := token()
	if err := writeSecret(s.AdminTokenFile, admin); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.ServerURL = "https://" + listen
	// No daemon bearer: the daemon joins with a one-time token, and
	// serve takes signed requests only, as a fleet would run it.
	s.serve, err = s.spawn("serve", s.ServeLog,
		"serve", "--listen", listen, "--data-dir", filepath.Join(s.Dir, "data"),
		"--require-signatures", "--admin-token-file", s.AdminTokenFile)
	if err != nil {
		return err
	}
	if err := s.waitHealthy(ctx); err != nil {
		return err
	}
	if s.Client, err = opclient.NewWithCA(s.ServerURL, admin, s.CAFile); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

// waitHealthy polls /healthz until it answers 200, serve exits, or 30 s.
// serve writes its CA before it listens, so the CA is read once the port
// answers.
func (s *Stack) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pause := 20 * time.Millisecond
	var last error
	for {
		if last = s.healthy(ctx); last == nil {
			return nil
		}
		select {
		case <-s.serve.done:
			return fmt.Errorf("devstack: serve exited before it was healthy (%v); see %s:\n%s", s.serve.err, s.ServeLog, tail(s.ServeLog))
		case <-ctx.Done():
			return fmt.Errorf("devstack: serve at %s not healthy: %w (last: %v); see %s", s.ServerURL, ctx.Err(), last, s.ServeLog)
		case <-time.After(pause):
		}
		pause = min(2*pause, 250*time.Millisecond)
	}
}

// healthy asks serve's /healthz once, verifying it by its CA.
func (s *Stack) healthy(ctx context.Context) error {
	cfg, err := tlsca.ClientConfig(s.CAFile)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.ServerURL+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /healthz: %s", resp.Status)
	}
	return nil
}

func (s *Stack) startDaemon(ctx context.Context) error {
	ipPort, err := freePort()
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	introspect := net.JoinHostPort("127.0.0.1", strconv.Itoa(ipPort))
	s.IntrospectURL = "http://" + introspect + "/status"
	data, err := s.daemonConfig(host, introspect).TOML()
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	if err := os.WriteFile(s.DaemonConfig, data, 0o600); err != nil {
		return fmt.Errorf("devstack: write %s: %w", s.DaemonConfig, err)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "work"), 0o700); err != nil {
		return fmt.Errorf("devstack: create workdir: %w", err)
	}
	if err := s.join(ctx); err != nil {
		return err
	}
	s.daemon, err = s.spawn("daemon", s.DaemonLog, "daemon", "--config", s.DaemonConfig)
	return err
}

// joinTimeout bounds the daemon's join: a probe of the host and a hello.
const joinTimeout = time.Minute

// join mints a token and runs the line it comes with, as an operator
// would on a new host: `nymph daemon join` pins serve's CA, makes the
// host key and writes it, the CA and the config.
func (s *Stack) join(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	created, err := s.Client.CreateToken(ctx, operator.TokenRequest{TTLS: joinTimeout.Seconds()})
	if err != nil {
		return fmt.Errorf("devstack: mint a join token: %w", err)
	}
	s.JoinLine = created.JoinCommand
	logf, err := os.OpenFile(s.DaemonLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("devstack: open daemon log %s: %w", s.DaemonLog, err)
	}
	defer logf.Close()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, s.opt.Binary, "daemon", "join", "--server", s.ServerURL, "--token", created.Token, "--config", s.DaemonConfig)
	cmd.Stdout, cmd.Stderr, cmd.Dir = io.MultiWriter(&out, logf), logf, s.Dir
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("devstack: nymph daemon join: %w; see %s:\n%s", err, s.DaemonLog, tail(s.DaemonLog))
	}
	if m := joinedKey.FindStringSubmatch(out.String()); m != nil {
		s.KeyID = m[1]
	}
	return nil
}

// joinedKey finds the key id in what `nymph daemon join` prints.
var joinedKey = regexp.MustCompile(`with key (\S+)`)

// daemonConfig is the daemon's configuration before its join: the
// defaults, attached to this stack's serve, never idle-exiting, retrying
// fast, draining within 5 s, and its introspection server on. The join
// adds the identity and the CA it pinned.
func (s *Stack) daemonConfig(host, introspect string) *daemonconfig.Config {
	cfg := daemonconfig.Defaults()
	cfg.Server.URL = s.ServerURL
	cfg.Daemon.MachineID = "dev-" + host
	cfg.Daemon.Label = "nymph dev on " + host
	cfg.Daemon.Tags = []string{"env=dev"}
	cfg.Runtime.KeepAliveS = -1
	cfg.Runtime.Workdir = filepath.Join(s.Dir, "work")
	cfg.Runtime.MaxInvocations = 8
	cfg.Poll.RetryMinS, cfg.Poll.RetryMaxS = 0.2, 2
	cfg.Shutdown.GraceS = 5
	cfg.Introspect = daemonconfig.Introspect{Enabled: true, Listen: introspect}
	return &cfg
}

// spawn starts the binary with args, output appended to logPath.
func (s *Stack) spawn(name, logPath string, args ...string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devstack: open %s log %s: %w", name, logPath, err)
	}
	defer logf.Close() // the child holds its own copy
	cmd := exec.Command(s.opt.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = s.Dir
	// Its own process group, so a terminal's Ctrl-C reaches only the parent,
	// which stops children in order.
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devstack: start %s (%s): %w", name, s.opt.Binary, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	s.opt.Log.Info("devstack: started", "child", name, "pid", cmd.Process.Pid)
	return c, nil
}

// Exited is closed when serve or the daemon exits (the stack is then
// broken); Why says which.
func (s *Stack) Exited() <-chan struct{} {
	s.exitOnce.Do(func() {
		s.exited = make(chan struct{})
		go func() {
			select {
			case <-s.serve.done:
				s.why = fmt.Sprintf("serve exited (%v)", s.serve.err)
			case <-s.daemon.done:
				s.why = fmt.Sprintf("daemon exited (%v)", s.daemon.err)
			}
			close(s.exited)
		}()
	})
	return s.exited
}

// Why says which child exited, once Exited is closed.
func (s *Stack) Why() string {
	<-s.Exited()
	return s.why
}

// Stop stops the daemon (SIGTERM: it drains and acks), then serve, killing
// either after StopGrace, and removes the directory unless Keep is set.
func (s *Stack) Stop() error {
	var errs []error
	for _, c := range []*child{s.daemon, s.serve} {
		if c == nil {
			continue
		}
		if err := s.stopChild(c); err != nil {
			errs = append(errs, err)
		}
	}
	if !s.opt.Keep && s.Dir != "" {
		if err := os.RemoveAll(s.Dir); err != nil {
			errs = append(errs, fmt.Errorf("devstack: remove %s: %w", s.Dir, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Stack) stopChild(c *child) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	// The child leads its own process group: stop the group, so whatever
	// the child started in it goes too.
	if procgroup.Stop(c.cmd.Process.Pid, c.done, s.opt.StopGrace) {
		return fmt.Errorf("devstack: %s did not exit within %s of SIGTERM; killed", c.name, s.opt.StopGrace)
	}
	return nil
}

func token() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func writeSecret(path, value string) error {
	if err := os.WriteFile(path, []byte(value+"\n"), 0o600); err != nil {
		return fmt.Errorf("devstack: write %s: %w", path, err)
	}
	return nil
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before the child binds it; then the child fails to start and
// Start reports it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devstack: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last few KiB of a log, for an error message.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const n = 4 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
