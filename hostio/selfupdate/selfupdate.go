package selfupdate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/wirecore/ulid"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Defaults of Options.
const (
	// DefaultMaxBytes bounds a download: nymph is tens of MiB, and a url
	// that streams without end must not fill the disk.
	DefaultMaxBytes = 256 << 20
	// DefaultTimeout bounds the whole download.
	DefaultTimeout = 10 * time.Minute
	// DefaultConfirm is how long a new binary has for its first hello.
	DefaultConfirm = 2 * time.Minute
)

// PreviousSuffix names the kept binary: NAME.previous beside NAME.
const PreviousSuffix = ".previous"

// ErrSameVersion is an update to the running version: nothing is done.
// It wraps wire.ErrOTASameVersion.
var ErrSameVersion = fmt.Errorf("selfupdate: %w", wire.ErrOTASameVersion)

// Options configure an Updater. Running and ServerURL are required.
type Options struct {
	// Running is the running binary's version.
	Running string
	// ServerURL is [server] url: the one origin whose CA is CAFile.
	ServerURL string
	// CAFile verifies a url on ServerURL's origin; "" is the system's roots.
	CAFile string
	// Downloads, when set, fetches the binary instead of clients built
	// from ServerURL and CAFile: a relayed daemon's goes through its relay
	// (httpclient.Downloads.Through).
	Downloads *httpclient.Downloads
	// Executable is the binary to replace; "" is os.Executable with
	// symlinks resolved.
	Executable string
	// Args and Env are what the new binary is executed with; nil is
	// os.Args and os.Environ().
	Args, Env []string
	MaxBytes  int64
	Timeout   time.Duration
	// Confirm is how long the new binary has for its first hello.
	Confirm time.Duration
	// Exec replaces the process image (syscall.Exec); tests substitute it.
	Exec func(path string, argv, env []string) error
	// Watch starts the rollback watchdog from the previous binary and
	// returns its pid; nil starts "PREVIOUS daemon ota-watch -- ARGS".
	Watch func(previous string, argv, env []string) (int, error)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Updater carries out ota_update commands.
type Updater struct {
	opt       Options
	downloads *httpclient.Downloads
}

// New checks opt and builds the download clients.
func New(opt Options) (*Updater, error) {
	if opt.Running == "" {
		return nil, errors.New("selfupdate: the running version is required")
	}
	downloads := opt.Downloads
	if downloads == nil {
		var err error
		if downloads, err = httpclient.NewDownloads(opt.ServerURL, opt.CAFile); err != nil {
			return nil, fmt.Errorf("selfupdate: %w", err)
		}
	}
	var err error
	if opt.Executable == "" {
		if opt.Executable, err = Executable(); err != nil {
			return nil, err
		}
	}
	if opt.Args == nil {
		opt.Args = os.Args
	}
	if opt.Env == nil {
		opt.Env = os.Environ()
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Confirm <= 0 {
		opt.Confirm = DefaultConfirm
	}
	if opt.Exec == nil {
		opt.Exec = syscall.Exec
	}
	if opt.Watch == nil {
		opt.Watch = StartWatchdog
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	return &Updater{opt: opt, downloads: downloads}, nil
}

// Executable is the running binary's path with symlinks resolved, so the
// new binary lands beside the real file and not beside a link to it.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("selfupdate: find the running executable: %w", err)
	}
	real, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return "", fmt.Errorf("selfupdate: resolve %s: %w", exe, err)
	}
	return real, nil
}

// Check refuses an update that must not be fetched: any on a system that
// cannot apply one (Windows), and one the daemon's machine refuses too
// (wire.CheckOTA: a sha256 that is not 64 hex characters, no version, no
// url, or the running version, ErrSameVersion). The rule is checked here
// again because an Updater can be driven without the machine.
func (u *Updater) Check(up wire.OTAUpdate) error {
	if err := supported(); err != nil {
		return err
	}
	err := wire.CheckOTA(up, u.opt.Running)
	switch {
	case errors.Is(err, wire.ErrOTASameVersion):
		return ErrSameVersion
	case err != nil:
		return refusal(up, err)
	}
	return nil
}

// Apply fetches, verifies and installs up, then executes the new binary;
// it returns only when the update did not happen, with why (the running
// binary is then unchanged). The daemon does it in two steps, Prepare
// and then, once its work has drained, Commit.
func (u *Updater) Apply(ctx context.Context, up wire.OTAUpdate) error {
	tmp, err := u.Prepare(ctx, up)
	if err != nil {
		return err
	}
	return u.Commit(up.Version, tmp)
}

// Prepare checks up and downloads it, verified, into a temporary file
// beside the executable (Fetch), whose path it returns: nothing is
// installed yet.
func (u *Updater) Prepare(ctx context.Context, up wire.OTAUpdate) (string, error) {
	if err := u.Check(up); err != nil {
		return "", err
	}
	return u.Fetch(ctx, up)
}

// Commit installs the verified file tmp (from Prepare) as version and
// executes it; it returns only when that did not happen, with why (the
// running binary is then unchanged, and tmp removed).
func (u *Updater) Commit(version, tmp string) error {
	previous, err := u.Install(tmp)
	if err != nil {
		os.Remove(tmp)
		return err
	}
	u.opt.Log.Info("ota_update installed; executing the new binary",
		"version", version, "from", u.opt.Running, "executable", u.opt.Executable, "previous", previous)
	return u.execNew(version, previous)
}

// Fetch downloads up.URL into a temporary file beside the executable and
// returns its path once its sha256 is up.SHA256.
func (u *Updater) Fetch(ctx context.Context, up wire.OTAUpdate) (string, error) {
	if !wire.ValidSHA256(up.SHA256) {
		return "", refusal(up, wire.ErrOTASHA256)
	}
	target, err := httpclient.CheckURL("selfupdate: ota_update", up.URL)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, u.opt.Timeout)
	defer cancel()
	body, length, err := u.downloads.Get(ctx, target.String(), nil, u.opt.MaxBytes)
	if err != nil {
		return "", fmt.Errorf("selfupdate: %w", err)
	}
	defer body.Close()
	if length > u.opt.MaxBytes {
		return "", fmt.Errorf("selfupdate: GET %s: %d bytes, over the %d-byte limit", target.Redacted(), length, u.opt.MaxBytes)
	}
	tmp := filepath.Join(filepath.Dir(u.opt.Executable), tempName(u.opt.Now()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("selfupdate: create %s: %w", tmp, err)
	}
	sum, err := copyHashed(f, body, u.opt.MaxBytes)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("selfupdate: download %s to %s: %w", target.Redacted(), tmp, err)
	}
	if !strings.EqualFold(sum, up.SHA256) {
		os.Remove(tmp)
		return "", fmt.Errorf("selfupdate: %s has sha256 %s, not %s: refused", target.Redacted(), sum, strings.ToLower(up.SHA256))
	}
	return tmp, nil
}

// refusal is why up is not fetched, with the value that broke the rule.
func refusal(up wire.OTAUpdate, err error) error {
	if errors.Is(err, wire.ErrOTASHA256) {
		return fmt.Errorf("selfupdate: %w: %q", err, up.SHA256)
	}
	return fmt.Errorf("selfupdate: %w", err)
}

// copyHashed copies at most limit bytes of r to w and returns their
// sha256; more than limit is an error.
func copyHashed(w io.Writer, r io.Reader, limit int64) (string, error) {
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(r, limit+1))
	if err != nil {
		return "", err
	}
	if n > limit {
		return "", fmt.Errorf("body over the %d-byte limit", limit)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// tempName is .nymph-ota-{pid}-{ulid}.tmp.
func tempName(now time.Time) string {
	var entropy [10]byte
	_, _ = rand.Read(entropy[:]) // crypto/rand.Read does not fail
	return fmt.Sprintf(".nymph-ota-%d-%s.tmp", os.Getpid(), ulid.String(now, entropy))
}

// Install makes tmp executable with the executable's mode | 0o111, keeps
// the executable as NAME.previous and renames tmp over it. It returns the
// previous binary's path.
func (u *Updater) Install(tmp string) (string, error) {
	exe := u.opt.Executable
	st, err := os.Stat(exe)
	if err != nil {
		return "", fmt.Errorf("selfupdate: stat %s: %w", exe, err)
	}
	if err := os.Chmod(tmp, st.Mode().Perm()|0o111); err != nil {
		return "", fmt.Errorf("selfupdate: chmod %s: %w", tmp, err)
	}
	previous := exe + PreviousSuffix
	if err := os.Remove(previous); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("selfupdate: remove %s: %w", previous, err)
	}
	// A hard link keeps a binary at exe at every moment; a filesystem
	// without links gets a rename, and the next rename fills the gap.
	if err := os.Link(exe, previous); err != nil {
		if err := os.Rename(exe, previous); err != nil {
			return "", fmt.Errorf("selfupdate: keep %s as %s: %w", exe, previous, err)
		}
	}
	if err := os.Rename(tmp, exe); err != nil {
		_ = restore(previous, exe)
		return "", fmt.Errorf("selfupdate: rename %s over %s: %w", tmp, exe, err)
	}
	syncDir(filepath.Dir(exe))
	return previous, nil
}

// restore renames previous back over exe.
func restore(previous, exe string) error {
	if err := os.Rename(previous, exe); err != nil {
		return fmt.Errorf("selfupdate: restore %s over %s: %w", previous, exe, err)
	}
	syncDir(filepath.Dir(exe))
	return nil
}

// syncDir makes renames in dir durable; a failure only weakens that.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// execNew starts the watchdog and executes the installed binary. When
// either fails the previous binary is put back and the error returned.
func (u *Updater) execNew(version, previous string) error {
	exe := u.opt.Executable
	m := Marker{From: u.opt.Running, To: version, Previous: previous,
		Deadline: u.opt.Now().Add(u.opt.Confirm), PID: os.Getpid(),
		Ready: filepath.Join(filepath.Dir(exe), fmt.Sprintf(".nymph-ota-%d.ready", os.Getpid()))}
	os.Remove(m.Ready)
	env := m.Environ(u.opt.Env)
	pid, err := u.opt.Watch(previous, u.opt.Args, env)
	if err != nil {
		_ = restore(previous, exe)
		return fmt.Errorf("selfupdate: start the rollback watchdog: %w", err)
	}
	m.Watchdog = pid
	env = m.Environ(u.opt.Env)
	err = u.opt.Exec(exe, u.opt.Args, env)
	// Exec returned: the old image still runs. Put the old binary back
	// and stop the watchdog, which would otherwise start a second daemon.
	if p, ferr := os.FindProcess(pid); ferr == nil {
		_ = p.Kill()
		_, _ = p.Wait()
	}
	if rerr := restore(previous, exe); rerr != nil {
		return errors.Join(fmt.Errorf("selfupdate: exec %s: %w", exe, err), rerr)
	}
	return fmt.Errorf("selfupdate: exec %s: %w", exe, err)
}
