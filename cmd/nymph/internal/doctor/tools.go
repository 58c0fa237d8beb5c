package doctor

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/nymphd/nymph/hostio/hostprobe"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Tool is a program a daemon may need.
type Tool struct {
	// Name is the program looked up on PATH, and the check's name.
	Name string
	// Required makes its absence a failure (bash: every exec runs under
	// it); otherwise absence is a warning when NeededBy is set, a skip
	// when not.
	Required bool
	// NeededBy says what of this daemon's configuration needs the tool
	// ("the docker runner"); empty when nothing does.
	NeededBy string
	// Version returns the tool's version, "" when it could not be had.
	Version func(ctx context.Context, path string) string
	// NoVersion explains a tool found but without a version, and
	// NoVersionFix says what to do about it.
	NoVersion, NoVersionFix string
}

// ToolCheck looks tool up on PATH and asks its version.
func ToolCheck(t Tool, lookPath func(string) (string, error)) func(context.Context) Result {
	return func(ctx context.Context) Result {
		path, err := lookPath(t.Name)
		if err != nil {
			switch {
			case t.Required:
				return Fail("install "+t.Name+" or put it on the daemon's PATH", "%s is not on PATH, and the daemon runs every exec under it", t.Name)
			case t.NeededBy != "":
				return Warn("install "+t.Name+" or put it on the daemon's PATH, or drop what needs it from the configuration",
					"%s is not on PATH, and %s needs it", t.Name, t.NeededBy)
			}
			return Skip("%s is not on PATH (nothing configured needs it)", t.Name)
		}
		v := t.Version(ctx, path)
		if v == "" {
			why, fix := t.NoVersion, t.NoVersionFix
			if why == "" {
				why = "it printed no version"
			}
			if fix == "" {
				fix = "check that " + path + " runs for the daemon's user"
			}
			if t.NeededBy == "" {
				return Skip("%s found at %s, but %s (nothing configured needs it)", t.Name, path, why)
			}
			return Warn(fix, "%s found at %s, but %s, and %s needs it", t.Name, path, why, t.NeededBy)
		}
		return OK("%s at %s", v, path)
	}
}

// Versions runs hostprobe's version probes (python3, docker, runsc) once
// for every tool check that needs one, so doctor reports what the daemon
// reports in its hello. The first check to ask runs them, bounded by its
// context and Timeout; the others wait for its answer.
type Versions struct {
	once sync.Once
	v    wire.Versions
	// Run runs a program (hostprobe's Env.Run).
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
	// Timeout bounds each probe (hostprobe.DefaultTimeout when zero).
	Timeout time.Duration
}

// probed names the programs Versions lets hostprobe run: the version
// probes doctor shows, and none of the host detectors or other probes.
func probed(name string) bool {
	switch name {
	case "python3", "python", "docker", "runsc":
		return true
	}
	return false
}

func (vs *Versions) get(ctx context.Context) wire.Versions {
	vs.once.Do(func() {
		run := vs.Run
		env := hostprobe.Env{
			Timeout: vs.Timeout,
			Run: func(ctx context.Context, name string, args ...string) ([]byte, error) {
				if !probed(name) {
					return nil, fmt.Errorf("doctor: %s is not probed", name)
				}
				return run(ctx, name, args...)
			},
		}
		vs.v = hostprobe.Probe(ctx, env).Versions
	})
	return vs.v
}

// Python is python3's version as hello reports it.
func (vs *Versions) Python(ctx context.Context, _ string) string { return deref(vs.get(ctx).Python) }

// Docker is the docker server's version: empty when the client finds no
// server.
func (vs *Versions) Docker(ctx context.Context, _ string) string { return deref(vs.get(ctx).Docker) }

// Runsc is gVisor's runsc version.
func (vs *Versions) Runsc(ctx context.Context, _ string) string { return deref(vs.get(ctx).Runsc) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// FirstLine runs path with args and returns the first line of its
// output, from after cut when cut is in it, for tools hostprobe does not
// probe (bash, sbatch, kubectl).
func FirstLine(args []string, cut string) func(ctx context.Context, path string) string {
	return func(ctx context.Context, path string) string {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.WaitDelay = 500 * time.Millisecond
		out, err := cmd.Output()
		if err != nil {
			return ""
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if cut != "" {
			if _, after, ok := strings.Cut(line, cut); ok {
				line = after
			}
		}
		return strings.TrimSpace(line)
	}
}
