package runners

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nymphd/nymph/hostio/idpath"
	"github.com/nymphd/nymph/wirecore/wire"
)

// File names of the workdir contract.
const (
	ArgsFile   = "args.msgpack"
	ResultFile = "result.msgpack"
	ErrorFile  = "error.json"
)

// MaxResultBytes bounds result.msgpack: what an ack carrying it can hold
// (wire.MaxResultBodyBytes, less room for the ack's other fields). A
// larger result could never be posted, and fails the run instead, its
// workdir kept.
const MaxResultBytes = wire.MaxResultBodyBytes - resultAckRoom

// resultAckRoom is what an ack needs besides its result blob: ids, a
// state, an error (all small; a traceback is bounded by error.json's
// limit, and a failed ack carries no blob).
const resultAckRoom = 64 << 10

// Environment variables every runner gives the entry program. Their
// DREAMLAKE_ prefix is the protocol's first implementation's: its entry
// package, which nymph runs unchanged, reads them by these names.
const (
	EnvInvocationID       = "DREAMLAKE_INVOCATION_ID"
	EnvWorkdir            = "DREAMLAKE_WORKDIR"
	EnvParentInvocationID = "DREAMLAKE_PARENT_INVOCATION_ID"
	EnvRootInvocationID   = "DREAMLAKE_ROOT_INVOCATION_ID"
)

// Owner is the uid/gid the workdir is handed to when the child runs as
// another user (as_user); nil keeps the daemon's own.
type Owner struct{ UID, GID int }

// PrepareWorkdir creates {root}/{idpath.Name(id)} with mode 0700 and writes args to
// args.msgpack in it. The root is created 0711 when missing, so that a
// child running as another user can reach its own directory without being
// able to list the others. A leftover directory of the same name (a
// redelivered command, or a failure kept for inspection) is reused:
// args.msgpack is rewritten and an old result.msgpack or error.json removed.
func PrepareWorkdir(root, id string, args []byte, owner *Owner) (string, error) {
	return PrepareWorkdirArgs(root, id, Args{Blob: args}, owner)
}

// Args is where args.msgpack comes from: the file File when it is set (a
// resolved payload_ref, copied so that the child owns its own copy), else
// the bytes Blob.
type Args struct {
	Blob []byte
	File string
}

// write writes the arguments to path, mode 0600.
func (a Args) write(path string) error {
	if a.File == "" {
		return os.WriteFile(path, a.Blob, 0o600)
	}
	in, err := os.Open(a.File)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// PrepareWorkdirArgs is PrepareWorkdir with the arguments from args.
func PrepareWorkdirArgs(root, id string, args Args, owner *Owner) (string, error) {
	name, err := idpath.Name(id)
	if err != nil {
		return "", fmt.Errorf("runners: workdir: %w", err)
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", fmt.Errorf("runners: create workdir root %s: %w", root, err)
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("runners: create workdir %s: %w", dir, err)
	}
	// Mkdir's mode is filtered by the umask and a reused directory keeps
	// its old mode; set it explicitly.
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("runners: chmod workdir %s: %w", dir, err)
	}
	// Outputs of an earlier attempt must not decide this one.
	for _, stale := range []string{ResultFile, ErrorFile} {
		if err := os.Remove(filepath.Join(dir, stale)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("runners: clear %s in %s: %w", stale, dir, err)
		}
	}
	argsPath := filepath.Join(dir, ArgsFile)
	if err := args.write(argsPath); err != nil {
		return "", fmt.Errorf("runners: write %s: %w", argsPath, err)
	}
	if owner != nil {
		for _, p := range []string{dir, argsPath} {
			if err := os.Lchown(p, owner.UID, owner.GID); err != nil {
				return "", fmt.Errorf("runners: hand %s to uid %d: %w", p, owner.UID, err)
			}
		}
	}
	return dir, nil
}

// ChildEnv is the environment a runner adds for the entry program:
// the invocation id, the workdir as the child sees it, and the parent and
// root invocation ids when the run has them.
func ChildEnv(run wire.Run, workdir string) []string {
	env := []string{
		EnvInvocationID + "=" + run.InvocationID,
		EnvWorkdir + "=" + workdir,
	}
	if run.ParentInvocationID != nil && *run.ParentInvocationID != "" {
		env = append(env, EnvParentInvocationID+"="+*run.ParentInvocationID)
	}
	if run.RootInvocationID != nil && *run.RootInvocationID != "" {
		env = append(env, EnvRootInvocationID+"="+*run.RootInvocationID)
	}
	return env
}

// childError is error.json as the entry program writes it.
type childError struct {
	Type      string  `json:"type"`
	Message   string  `json:"message"`
	Traceback *string `json:"traceback"`
}

// ReadOutcome decides an entry program's outcome from its workdir, once
// the child has ended. exited is nil when the child exited 0, otherwise
// what ended it (an exit status, a signal, a job state).
//
// The rule, in order:
//  1. exit 0 and result.msgpack exists: succeeded, its bytes are the result.
//  2. error.json exists: failed with its type, message "<type>: <message>"
//     and its traceback — whatever the exit status.
//  3. exit 0 with neither file: failed, DaemonError, because the contract
//     says success writes result.msgpack and an empty result would hide a
//     broken entry program.
//  4. otherwise: failed, DaemonError naming how the child ended.
func ReadOutcome(workdir string, exited error) Outcome {
	if exited == nil {
		blob, err := readResult(filepath.Join(workdir, ResultFile))
		switch {
		case err == nil:
			return Outcome{State: wire.StateSucceeded, ResultBlob: blob}
		case !errors.Is(err, fs.ErrNotExist):
			return Failed(wire.ErrTypeDaemon, err.Error())
		}
	}
	if info, ok, err := readChildError(filepath.Join(workdir, ErrorFile)); ok {
		return Outcome{State: wire.StateFailed, Error: info}
	} else if err != nil {
		return Failed(wire.ErrTypeDaemon, err.Error())
	}
	if exited == nil {
		return Failed(wire.ErrTypeDaemon, "entry program exited 0 without writing "+ResultFile+" or "+ErrorFile)
	}
	return Failed(wire.ErrTypeDaemon, "entry program failed: "+exited.Error())
}

func readResult(path string) ([]byte, error) { return readOutput(path, MaxResultBytes) }

// MaxErrorFileBytes bounds error.json: a type, a message and a traceback.
const MaxErrorFileBytes = 1 << 20

// readOutput reads a file the child wrote into its workdir, which it (or
// anything in its container) controls: at most limit bytes, a regular
// file only (a symlink to a host file or to /dev/zero, or a FIFO that
// would block the read for good, is refused). A missing file is
// fs.ErrNotExist.
func readOutput(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, openFlags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("runners: open %s: %w (not a regular file?)", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("runners: %s is not a regular file", path)
	}
	blob, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("runners: read %s: %w", path, err)
	}
	if int64(len(blob)) > limit {
		return nil, fmt.Errorf("runners: %s is larger than %d bytes", path, limit)
	}
	return blob, nil
}

// readChildError reads error.json; ok is false when there is none.
func readChildError(path string) (info *wire.ErrorInfo, ok bool, err error) {
	b, err := readOutput(path, MaxErrorFileBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var ce childError
	if err := json.Unmarshal(b, &ce); err != nil {
		return nil, false, fmt.Errorf("runners: decode %s: %w", path, err)
	}
	return SurfaceError(ce.Type, ce.Message, ce.Traceback), true, nil
}

// SurfaceError turns a child's {type, message, traceback} into the ack's
// error: the type is kept, as far as an ack can carry it (wire.FitText:
// a plane refuses an ack whose type is too long or holds a control
// character, and the outcome would be lost), the message reads
// "<type>: <message>" as the spec surfaces it, the type whole. A child error without a type is a DaemonError.
func SurfaceError(typ, message string, traceback *string) *wire.ErrorInfo {
	if typ == "" {
		return &wire.ErrorInfo{TypeName: wire.ErrTypeDaemon, Message: message, Traceback: traceback}
	}
	return &wire.ErrorInfo{TypeName: wire.FitText(typ, wire.MaxNameBytes), Message: typ + ": " + message, Traceback: traceback}
}

// Failed is the outcome of a runner that fails with a type and a message.
func Failed(typ, message string) Outcome {
	if typ == "" {
		typ = wire.ErrTypeDaemon
	}
	return Outcome{State: wire.StateFailed, Error: &wire.ErrorInfo{TypeName: typ, Message: message}}
}

// Killed is the outcome of an invocation stopped because the daemon's
// shutdown grace expired.
func Killed() Outcome {
	return Outcome{State: wire.StateKilled, Error: &wire.ErrorInfo{TypeName: wire.ErrTypeCancelled, Message: wire.CancelledMessage}}
}

// FinishWorkdir applies the contract's last step: a succeeded invocation's
// workdir is deleted; a failed or killed one is kept for inspection.
func FinishWorkdir(workdir string, o Outcome, log *slog.Logger) {
	if o.State != wire.StateSucceeded {
		log.Info("workdir kept for inspection", "workdir", workdir, "state", o.State)
		return
	}
	if err := os.RemoveAll(workdir); err != nil {
		log.Warn("remove workdir", "workdir", workdir, "err", err)
	}
}
