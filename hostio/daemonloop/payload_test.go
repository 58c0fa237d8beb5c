package daemonloop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/hostio/shellexec"
	"github.com/nymphd/nymph/wirecore/daemon"
	"github.com/nymphd/nymph/wirecore/wire"
)

// fetcher answers every payload ref with path or err.
type fetcher struct {
	path string
	err  error
	refs []wire.PayloadRef
}

func (f *fetcher) Fetch(_ context.Context, ref wire.PayloadRef) (string, bool, error) {
	f.refs = append(f.refs, ref)
	return f.path, false, f.err
}

// execDriver is a driver whose execs record what they were started with
// and read their payload file while they "run".
func execDriver(t *testing.T, f PayloadFetcher) (*driver, *[]string) {
	var seen []string
	d := newDriver(Options{
		Transport:   &recordingTransport{},
		Payloads:    f,
		ExecOptions: shellexec.Options{DefaultWorkdir: t.TempDir()},
		Exec: func(_ context.Context, ex wire.Exec, _ shellexec.Options) wire.ExecResult {
			file := ex.Env[wire.EnvPayload]
			data, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("exec %s: payload %q: %v", ex.ExecID, file, err)
			}
			seen = append(seen, file+"="+string(data))
			return wire.ExecResult{ExitCode: 0}
		},
	})
	t.Cleanup(d.stop)
	return d, &seen
}

func execFinished(t *testing.T, d *driver) daemon.ExecFinished {
	t.Helper()
	select {
	case ev := <-d.events:
		return ev.(daemon.ExecFinished)
	case <-time.After(10 * time.Second):
		t.Fatal("no ExecFinished")
	}
	panic("unreachable")
}

// A payload that cannot be had ends the exec at -1 and spawns nothing.
func TestExecPayloadRefusedSpawnsNothing(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	f := &fetcher{err: errors.New("payload ns/k: digest mismatch")}
	d, seen := execDriver(t, f)
	d.startExec(daemon.StartExec{CommandID: "c1", Exec: wire.Exec{ExecID: "x1", Command: "true",
		PayloadRef: &wire.PayloadRef{Bucket: "ns", Key: "k", SHA256: &sha}}})
	got := execFinished(t, d)
	if got.Result.ExitCode != wire.ExitSpawnFailed || got.Result.Error == nil || !strings.Contains(*got.Result.Error, "digest mismatch") {
		t.Fatalf("result %+v", got.Result)
	}
	if len(*seen) != 0 {
		t.Fatalf("the command ran: %v", *seen)
	}
	// Both fields at once is refused without fetching.
	f.refs = nil
	d.startExec(daemon.StartExec{CommandID: "c2", Exec: wire.Exec{ExecID: "x2", Command: "true",
		PayloadInline: wire.Blob("x"), PayloadRef: &wire.PayloadRef{Bucket: "ns", Key: "k"}}})
	if got := execFinished(t, d); got.Result.ExitCode != wire.ExitSpawnFailed || len(f.refs) != 0 || len(*seen) != 0 {
		t.Fatalf("both payloads: result %+v, %d fetches, ran %v", got.Result, len(f.refs), *seen)
	}
}

// An inline payload and a fetched one each reach the command as the file
// $NYMPH_PAYLOAD names, gone once the exec ended.
func TestExecPayloadReachesTheCommand(t *testing.T) {
	entry := filepath.Join(t.TempDir(), "entry")
	if err := os.WriteFile(entry, []byte("by reference"), 0o444); err != nil {
		t.Fatal(err)
	}
	d, seen := execDriver(t, &fetcher{path: entry})
	d.startExec(daemon.StartExec{CommandID: "c1", Exec: wire.Exec{ExecID: "x1", Command: "true", PayloadInline: wire.Blob("inline bytes")}})
	execFinished(t, d)
	d.startExec(daemon.StartExec{CommandID: "c2", Exec: wire.Exec{ExecID: "x2", Command: "true",
		Env: map[string]string{"KEEP": "1"}, PayloadRef: &wire.PayloadRef{Bucket: "ns", Key: "k"}}})
	execFinished(t, d)
	if len(*seen) != 2 || !strings.HasSuffix((*seen)[0], "=inline bytes") || !strings.HasSuffix((*seen)[1], "=by reference") {
		t.Fatalf("commands saw %v", *seen)
	}
	for _, s := range *seen {
		file, _, _ := strings.Cut(s, "=")
		if _, err := os.Stat(filepath.Dir(file)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("staging dir of %s left after the exec: %v", file, err)
		}
	}
}
