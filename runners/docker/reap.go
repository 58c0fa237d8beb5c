package docker

import (
	"context"
	"log/slog"
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

// Reap implements runners.Reaper. A run's `docker run` client writes the
// container's id to its workdir's container.cid (--cidfile); when the
// daemon is killed outright, childpids stops the client, but the
// container is dockerd's and runs on — its PID 1 ignores the SIGTERM the
// client forwards unless it handles it. So every root/*/container.cid
// still present names a container of a run no daemon carries any more:
// it is removed (docker rm -f), and so is the cidfile. A container that
// is gone already (the client's --rm took it) costs a quiet miss.
func (r *Runner) Reap(ctx context.Context, root string, log *slog.Logger) {
	runners.EachLeftover(ctx, root, CIDFile, func(ctx context.Context, f string) { r.reapOne(ctx, f, log) })
}

func (r *Runner) reapOne(ctx context.Context, cidfile string, log *slog.Logger) {
	b, err := os.ReadFile(cidfile)
	cid := strings.TrimSpace(string(b))
	switch {
	case err != nil:
		log.Warn("leftover container id unreadable", "file", cidfile, "err", err)
		return
	case cid == "":
		// docker writes the id once the container exists: none was made.
		_ = os.Remove(cidfile)
		return
	case !containerID.MatchString(cid):
		log.Warn("leftover container id file does not hold a container id; left as it is", "file", cidfile)
		return
	}
	cmd := exec.CommandContext(ctx, r.opt.Docker, "rm", "-f", cid)
	cmd.Env = r.clientEnv(nil)
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	switch {
	case strings.Contains(text, "No such container"):
		// Gone with its client's --rm (`rm -f` says so and exits 0).
	case err == nil:
		log.Warn("container of an earlier daemon's run still there; removed", "cid", cid, "workdir", filepath.Dir(cidfile))
	default:
		log.Warn("container of an earlier daemon's run could not be removed", "cid", cid, "err", err, "output", text)
		return // kept, so the next start tries again
	}
	if err := os.Remove(cidfile); err != nil && !os.IsNotExist(err) {
		log.Warn("leftover container id file not removed", "file", cidfile, "err", err)
	}
}
