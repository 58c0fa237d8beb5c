//go:build unix

package selfupdate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

var errExecFake = errors.New("exec refused by the test")

type fixture struct {
	dir, exe string
	srv      *httptest.Server
	gets     atomic.Int32
	auth     atomic.Value
	body     []byte
	exec     struct {
		path       string
		argv, env  []string
		called     bool
		watchCalls int
	}
}

func newFixture(t *testing.T, body []byte) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), body: body}
	f.exe = filepath.Join(f.dir, "nymph")
	if err := os.WriteFile(f.exe, []byte("old binary"), 0o750); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.gets.Add(1)
		f.auth.Store(r.Header.Get("Authorization"))
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/bin", http.StatusFound)
			return
		}
		w.Write(f.body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) updater(t *testing.T, mut func(*Options)) *Updater {
	t.Helper()
	opt := Options{Running: "1.0.0", ServerURL: f.srv.URL, Executable: f.exe,
		Args: []string{"nymph", "daemon", "--config", "x.toml"}, Env: []string{"A=1", MarkerEnv + "=stale"},
		Exec: func(path string, argv, env []string) error {
			f.exec.path, f.exec.argv, f.exec.env, f.exec.called = path, argv, env, true
			return errExecFake
		},
		Watch: func(previous string, argv, env []string) (int, error) {
			f.exec.watchCalls++
			return 0, nil
		},
	}
	if mut != nil {
		mut(&opt)
	}
	u, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, ".nymph-ota-*.tmp"))
	return m
}

func TestCheckRefusesBeforeAnyDownload(t *testing.T) {
	f := newFixture(t, []byte("new"))
	u := f.updater(t, nil)
	for name, tc := range map[string]struct {
		up   wire.OTAUpdate
		want error
		text string
	}{
		"short sha":   {wire.OTAUpdate{Version: "2", URL: f.srv.URL + "/bin", SHA256: "abc"}, wire.ErrOTASHA256, "64 hex"},
		"non-hex sha": {wire.OTAUpdate{Version: "2", URL: f.srv.URL + "/bin", SHA256: strings.Repeat("g", 64)}, wire.ErrOTASHA256, "64 hex"},
		"65 chars":    {wire.OTAUpdate{Version: "2", URL: f.srv.URL + "/bin", SHA256: strings.Repeat("a", 65)}, wire.ErrOTASHA256, "64 hex"},
		"no version":  {wire.OTAUpdate{URL: f.srv.URL + "/bin", SHA256: sum(f.body)}, wire.ErrOTANoVersion, "selfupdate: version is empty"},
		"no url":      {wire.OTAUpdate{Version: "2", SHA256: sum(f.body)}, wire.ErrOTANoURL, "selfupdate: url is empty"},
	} {
		// The machine's own rule (wire.CheckOTA), so the machine and the
		// updater refuse the same commands.
		if err := u.Apply(context.Background(), tc.up); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: Apply = %v, want %v, naming %q", name, err, tc.want, tc.text)
		}
	}
	err := u.Apply(context.Background(), wire.OTAUpdate{Version: "1.0.0", URL: f.srv.URL + "/bin", SHA256: sum(f.body)})
	if !errors.Is(err, ErrSameVersion) || !errors.Is(err, wire.ErrOTASameVersion) {
		t.Errorf("same version: Apply = %v, want ErrSameVersion (wire.ErrOTASameVersion)", err)
	}
	if n := f.gets.Load(); n != 0 {
		t.Errorf("%d downloads, want none", n)
	}
}

func TestMismatchKeepsTheOldBinary(t *testing.T) {
	f := newFixture(t, []byte("tampered binary"))
	u := f.updater(t, nil)
	err := u.Apply(context.Background(), wire.OTAUpdate{Version: "2", URL: f.srv.URL + "/bin", SHA256: sum([]byte("the real binary"))})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Apply = %v, want a sha256 refusal", err)
	}
	if b, _ := os.ReadFile(f.exe); string(b) != "old binary" {
		t.Errorf("executable holds %q, want the old binary", b)
	}
	if l := leftovers(t, f.dir); len(l) != 0 {
		t.Errorf("temporary files left: %v", l)
	}
	if f.exec.called || f.exec.watchCalls != 0 {
		t.Error("a refused update executed something")
	}
	if a := f.auth.Load(); a != "" {
		t.Errorf("download carried Authorization %q", a)
	}
}

func TestOversizeAndRedirectRefused(t *testing.T) {
	f := newFixture(t, make([]byte, 2048))
	u := f.updater(t, func(o *Options) { o.MaxBytes = 1024 })
	if err := u.Apply(context.Background(), wire.OTAUpdate{Version: "2", URL: f.srv.URL + "/bin", SHA256: sum(f.body)}); err == nil {
		t.Error("a body over MaxBytes was accepted")
	}
	u = f.updater(t, nil)
	if err := u.Apply(context.Background(), wire.OTAUpdate{Version: "2", URL: f.srv.URL + "/moved", SHA256: sum(f.body)}); err == nil || !strings.Contains(err.Error(), "redirects are not followed") {
		t.Errorf("redirect: Apply = %v, want it refused", err)
	}
	if l := leftovers(t, f.dir); len(l) != 0 {
		t.Errorf("temporary files left: %v", l)
	}
}

func TestInstallAndExec(t *testing.T) {
	f := newFixture(t, []byte("new binary"))
	u := f.updater(t, nil)
	err := u.Apply(context.Background(), wire.OTAUpdate{Version: "2.0.0", URL: f.srv.URL + "/bin", SHA256: strings.ToUpper(sum(f.body))})
	if !errors.Is(err, errExecFake) {
		t.Fatalf("Apply = %v, want the fake exec's error", err)
	}
	if !f.exec.called || f.exec.path != f.exe || f.exec.watchCalls != 1 {
		t.Fatalf("exec %+v, want %s after one watchdog", f.exec, f.exe)
	}
	if strings.Join(f.exec.argv, " ") != "nymph daemon --config x.toml" {
		t.Errorf("argv %q, want the original arguments", f.exec.argv)
	}
	var marker string
	for _, kv := range f.exec.env {
		if v, ok := strings.CutPrefix(kv, MarkerEnv+"="); ok {
			if marker != "" {
				t.Errorf("two markers in the environment")
			}
			marker = v
		}
	}
	m, err := ParseMarker(marker)
	if err != nil {
		t.Fatal(err)
	}
	if m.From != "1.0.0" || m.To != "2.0.0" || m.PID != os.Getpid() || m.Previous != f.exe+PreviousSuffix || m.Executable() != f.exe {
		t.Errorf("marker %+v", m)
	}
	if d := time.Until(m.Deadline); d < time.Minute || d > DefaultConfirm+time.Second {
		t.Errorf("deadline in %v, want about %v", d, DefaultConfirm)
	}
	// The fake exec failed: the old binary is back and nothing is left.
	if b, _ := os.ReadFile(f.exe); string(b) != "old binary" {
		t.Errorf("after a failed exec the executable holds %q", b)
	}
	if _, err := os.Stat(f.exe + PreviousSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("previous binary still there after the restore: %v", err)
	}
}

func TestInstallKeepsPrevious(t *testing.T) {
	f := newFixture(t, []byte("new binary"))
	u := f.updater(t, nil)
	tmp, err := u.Fetch(context.Background(), wire.OTAUpdate{Version: "2", URL: f.srv.URL + "/bin", SHA256: sum(f.body)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(tmp), ".nymph-ota-") || filepath.Dir(tmp) != f.dir {
		t.Errorf("temporary file %s, want .nymph-ota-* in %s", tmp, f.dir)
	}
	prev, err := u.Install(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(prev); string(b) != "old binary" {
		t.Errorf("previous holds %q", b)
	}
	st, _ := os.Stat(f.exe)
	if b, _ := os.ReadFile(f.exe); string(b) != "new binary" || st.Mode().Perm() != 0o751 {
		t.Errorf("executable holds %q mode %v, want the new binary at 0751", b, st.Mode().Perm())
	}
}

func TestProbation(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "nymph")
	os.WriteFile(exe, []byte("new"), 0o755)
	os.WriteFile(exe+PreviousSuffix, []byte("old"), 0o755)
	m := Marker{From: "1", To: "2", Previous: exe + PreviousSuffix, Ready: filepath.Join(dir, "ready"), Deadline: time.Now().Add(time.Hour)}

	hello := make(chan struct{})
	close(hello)
	p := &Probation{Marker: m, Args: []string{"nymph"}, Env: []string{}, Exec: func(string, []string, []string) error {
		t.Error("a confirmed update executed something")
		return nil
	}}
	if err := p.Run(context.Background(), hello); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.Ready); err != nil {
		t.Errorf("no ready file after a hello: %v", err)
	}
	os.Remove(m.Ready)

	m.Deadline = time.Now().Add(50 * time.Millisecond)
	var gotEnv []string
	p = &Probation{Marker: m, Args: []string{"nymph", "daemon"}, Env: []string{MarkerEnv + "=x"}, Exec: func(path string, argv, env []string) error {
		gotEnv = env
		return errExecFake
	}}
	if err := p.Run(context.Background(), make(chan struct{})); !errors.Is(err, errExecFake) {
		t.Fatalf("Run = %v, want the fake exec's error", err)
	}
	if b, _ := os.ReadFile(exe); string(b) != "old" {
		t.Errorf("after the deadline the executable holds %q, want the previous binary", b)
	}
	if strings.Join(gotEnv, " ") != RolledBackEnv+"=2" {
		t.Errorf("env %q, want only %s=2", gotEnv, RolledBackEnv)
	}
	if _, err := os.Stat(m.Ready); err != nil {
		t.Errorf("the watchdog was not told: %v", err)
	}
}

func TestMarkerRoundTrip(t *testing.T) {
	m := Marker{From: "1.0", To: "2.0", Previous: "/opt/a;b c/nymph.previous", Ready: "/opt/r", Deadline: time.Unix(1700000000, 0), PID: 7, Watchdog: 42}
	got, err := ParseMarker(m.Encode())
	if err != nil || got != m {
		t.Errorf("ParseMarker(Encode) = %+v, %v; want %+v", got, err, m)
	}
	if _, err := ParseMarker("from=1&previous=/x.previous&ready=/r&deadline=1"); err == nil {
		t.Error("a marker without the updating pid parsed")
	}
	if _, err := ParseMarker("from=1"); err == nil {
		t.Error("a marker without a previous binary parsed")
	}
}
