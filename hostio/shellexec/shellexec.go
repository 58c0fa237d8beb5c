// Package shellexec runs one `exec` command of protocol "1": `bash -c
// <command>` in its own process group, with the exit-code sentinels, the
// output caps and the streaming mode of docs/protocol.md ("exec", "Exec
// result", "Log chunks").
//
// It decides how a shell command is spawned, timed out, killed and how its
// output is captured or streamed. It does not decide when an exec runs, how
// many run at once, or how the result reaches the control plane: the daemon
// driver does, and it posts log chunks through the ChunkPoster it passes in.
package shellexec

import (
	"context"
	"log/slog"
	"time"

	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/wirecore/wire"
)

// MaxCapture is how many bytes of stdout and of stderr a non-streaming exec
// keeps; the rest is read and discarded, and the result's error says so.
const MaxCapture = 1 << 20

// ReadSize is the size of one read from the child's stdout or stderr.
const ReadSize = 8 << 10

// Defaults used when Options or the LogSink leave a value at zero.
const (
	DefaultKillGrace  = 5 * time.Second
	DefaultDrainGrace = 2 * time.Second
	DefaultFlushBytes = 64 << 10
	DefaultFlushEvery = 250 * time.Millisecond
	// DefaultMaxBuffered bounds the bytes a streaming exec holds while chunk
	// posts fail; past it the child's writes block until a post succeeds.
	DefaultMaxBuffered = 16 << 20
	// DefaultShutdownPostGrace bounds each chunk post made after the
	// exec's context was cancelled (daemon shutdown).
	DefaultShutdownPostGrace = 5 * time.Second
)

// ChunkPoster posts one chunk of raw log bytes to a LogSink URL. The driver
// implements it with its transport (octet-stream body, bearer attached).
// data is only valid during the call: the caller reuses it afterwards.
type ChunkPoster interface {
	PostChunk(ctx context.Context, url string, data []byte) error
}

// Options configures Run. The zero value works: it uses the daemon's own
// environment and working directory and the spec's 5 s kill grace.
type Options struct {
	// DefaultWorkdir is the cwd of an exec without workdir ([runtime]
	// workdir). Empty means the daemon's own cwd.
	DefaultWorkdir string
	// BaseEnv is the environment the exec's env is merged on top of; nil
	// means os.Environ().
	BaseEnv []string
	// Poster ships log chunks of a streaming exec. A streaming exec without
	// a Poster logs a warning and drops its output.
	Poster ChunkPoster
	Logger *slog.Logger
	// KillGrace is how long the process group has to exit after SIGTERM
	// before SIGKILL (timeout and cancellation). Zero means 5 s.
	KillGrace time.Duration
	// DrainGrace is how long output is still read after the shell itself
	// exited, for background processes that keep stdout open. Zero means 2 s.
	DrainGrace time.Duration
	// MaxBuffered bounds the unsent bytes of a streaming exec. Zero means
	// DefaultMaxBuffered.
	MaxBuffered int
	// ShutdownPostGrace bounds each chunk post once ctx is cancelled.
	// Zero means DefaultShutdownPostGrace.
	ShutdownPostGrace time.Duration
	// Now reads the clock for duration_ms; nil means time.Now.
	Now func() time.Time
	// PIDs, when set, holds a PID file for each shell while it runs, so a
	// daemon killed outright stops the shell's group at its next start
	// (childpids.Dir.Reap). Nil records none.
	PIDs *childpids.Dir
}

// Run executes ex and returns its result; it never fails, every failure is
// folded into the result (exit code -1 or -2 and the error field). It blocks
// until the process group is gone and, in streaming mode, every chunk has
// been offered to the poster. Cancelling ctx (daemon shutdown) kills the
// group with the same SIGTERM, grace, SIGKILL escalation as a timeout and
// yields exit code -1.
func Run(ctx context.Context, ex wire.Exec, opt Options) wire.ExecResult {
	return run(ctx, ex, opt.withDefaults())
}
