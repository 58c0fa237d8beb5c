//go:build unix

package shellexec

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/wirecore/wire"
)

// listPIDs prints the PID files in $PIDS once there is one (up to 5 s):
// the shell's own is written once the shell started.
const listPIDs = `for i in $(seq 500); do l=$(ls "$PIDS"); test -n "$l" && break; sleep 0.01; done; echo "$l"`

func TestPIDFileWhileTheShellRuns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command string // $PIDS is the PID directory
		timeout *wire.Number
		code    int
	}{
		{name: "exits", command: listPIDs + `; echo "shell $$"`},
		{name: "timed out", command: listPIDs + `; echo "shell $$"; sleep 60`, timeout: ptr(wire.Number(0.5)), code: wire.ExitTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pids, err := childpids.Open(filepath.Join(t.TempDir(), "pids"))
			if err != nil {
				t.Fatal(err)
			}
			opt := testOptions()
			opt.PIDs = pids
			res := Run(context.Background(), wire.Exec{ExecID: "e", Command: tc.command, TimeoutS: tc.timeout,
				Env: map[string]string{"PIDS": pids.Path()}}, opt)
			if int(res.ExitCode) != tc.code {
				t.Fatalf("exit %d, want %d; %+v", res.ExitCode, tc.code, res)
			}
			m := regexp.MustCompile(`^(\d+)-\d+\.json\nshell (\d+)\n$`).FindStringSubmatch(res.Stdout)
			if m == nil || m[1] != m[2] {
				t.Fatalf("stdout %q: want the shell's own PID file, named by its pid", res.Stdout)
			}
			if _, err := strconv.Atoi(m[1]); err != nil {
				t.Fatal(err)
			}
			left, err := os.ReadDir(pids.Path())
			if err != nil || len(left) != 0 {
				t.Errorf("PID files after the exec: %v, %v; want none", left, err)
			}
		})
	}
}

func TestExecRunsWhenItsPIDFileCannotBeWritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pids")
	pids, err := childpids.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	opt := testOptions()
	opt.PIDs = pids
	opt.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	res := Run(context.Background(), wire.Exec{ExecID: "e", Command: "echo ran"}, opt)
	if res.ExitCode != 0 || res.Stdout != "ran\n" {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(logs.String(), "without a PID file") {
		t.Errorf("log does not say the PID file is missing:\n%s", logs.String())
	}
}
