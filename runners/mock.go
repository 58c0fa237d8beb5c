//go:build nymph_mock

package runners

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
)

const mockBuilt = true

// BuildTagged returns the runners that exist only in tagged builds: the
// mock runner.
func BuildTagged() []Runner { return []Runner{Mock{}} }

// Mock follows the workdir contract without spawning anything, so the
// daemon can be tested end to end on a host without an entry program.
// function.qualname decides: "fail" writes error.json {type MockError},
// "hang" waits for cancellation, anything else echoes args.msgpack into
// result.msgpack.
type Mock struct{}

// Kind implements Runner.
func (Mock) Kind() string { return KindMock }

// Run implements Runner.
func (Mock) Run(ctx context.Context, inv Invocation) Outcome {
	switch inv.Run.Function.Qualname {
	case "hang":
		<-ctx.Done()
		return Killed()
	case "fail":
		b, _ := json.Marshal(childError{Type: "MockError", Message: "asked to fail"})
		if err := os.WriteFile(filepath.Join(inv.Workdir, ErrorFile), b, 0o600); err != nil {
			return Failed("", err.Error())
		}
		return ReadOutcome(inv.Workdir, errors.New("exit status 1"))
	}
	args, err := os.ReadFile(filepath.Join(inv.Workdir, ArgsFile))
	if err == nil {
		err = os.WriteFile(filepath.Join(inv.Workdir, ResultFile), args, 0o600)
	}
	if err != nil {
		return Failed("", err.Error())
	}
	return ReadOutcome(inv.Workdir, nil)
}
