package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nymphd/nymph/runners"
)

// containerID is what a cidfile holds: docker's hex id. Anything else is
// never handed to the docker client as an argument.
var containerID = regexp.MustCompile(`^[0-9a-f]{12,64}$`)

// Leftovers implements runners.Reaper. A run's `docker run` client writes
// the container's id to its workdir's container.cid (--cidfile), and the
// run removes it when the client returns, unless the container could not
// be stopped. When the daemon is killed outright, childpids stops the
// client, but the container is dockerd's and runs on — its PID 1 ignores
// the SIGTERM the client forwards unless it handles it. So a cidfile still
// present at the next start names a container that may run on with no
// daemon carrying its run: it is removed (docker rm -f), and so is the
// cidfile. A container that is gone already (the client's --rm took it)
// costs a quiet miss.
func (r *Runner) Leftovers() runners.Leftovers {
	return runners.Leftovers{File: CIDFile, Noun: "container", Stop: r.removeContainer}
}

func (r *Runner) removeContainer(ctx context.Context, _, cid string) error {
	switch {
	case cid == "":
		// docker writes the id once the container exists: none was made.
		return runners.ErrLeftoverGone
	case !containerID.MatchString(cid):
		return fmt.Errorf("%w: not a container id", runners.ErrNotALeftover)
	}
	cmd := exec.CommandContext(ctx, r.opt.Docker, "rm", "-f", cid)
	cmd.WaitDelay = runners.ClientWaitDelay
	cmd.Env = r.clientEnv(nil)
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	switch {
	case strings.Contains(text, "No such container"):
		// Gone with its client's --rm (`rm -f` says so and exits 0).
		return runners.ErrLeftoverGone
	case err != nil:
		return fmt.Errorf("docker rm -f %s: %w: %s", cid, err, text)
	}
	return nil
}

// removeEarlier removes the container an earlier delivery's cidfile in
// workdir names, if there is one; a record that names none (empty, or
// not an id) is left to Follow to clear.
func (r *Runner) removeEarlier(ctx context.Context, workdir string) error {
	b, err := os.ReadFile(filepath.Join(workdir, CIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = r.removeContainer(ctx, workdir, strings.TrimSpace(string(b)))
	if errors.Is(err, runners.ErrLeftoverGone) || errors.Is(err, runners.ErrNotALeftover) {
		return nil
	}
	return err
}
