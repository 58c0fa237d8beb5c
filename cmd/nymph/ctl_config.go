package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
	"github.com/nymphd/nymph/wirecore/wire"
)

// ctlConfig sets live configuration on one worker or on all of them:
// KEY=VALUE arguments (wire.LiveConfigKeys; KEY= removes one), checked
// here and by serve. A daemon that speaks the config extension applies
// them at once; for another, serve keeps them and says so.
func ctlConfig(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("config")
	all := fs.Bool("all", false, "every worker that is not lost")
	pos, rest, st := c.prepare("config", fs, args, 0, true)
	if st >= 0 {
		return st
	}
	pairs := append(pos, rest...)
	var targets []string
	switch {
	case *all:
		var err error
		if targets, err = c.reachableWorkers(ctx); err != nil {
			return c.fail(err)
		}
	case len(pairs) > 0 && !strings.Contains(pairs[0], "="):
		id, st := c.worker(ctx, pairs[0])
		if st >= 0 {
			return st
		}
		targets, pairs = []string{id}, pairs[1:]
	default:
		return c.usageErr("config", "name one WORKER or --all, then KEY=VALUE...")
	}
	set, err := liveConfigPairs(pairs)
	if err != nil {
		return c.usageErr("config", "%v", err)
	}
	failed := 0
	for _, id := range targets {
		w, err := c.client.SetConfig(ctx, id, set)
		if err != nil {
			termtext.Fprintf(c.env.stderr, "nymph ctl: config: worker %s: %v\n", id, err)
			failed++
			continue
		}
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(w.LiveConfig)) {
			kv = append(kv, k+"="+w.LiveConfig[k])
		}
		note := "applied by its daemon now"
		if !slices.Contains(w.Extensions, wire.ExtConfig) {
			note = "kept: its daemon does not speak the config extension"
		}
		termtext.Fprintf(c.env.stdout, "%s: %s (%s)\n", w.ID, strings.Join(kv, " "), note)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// liveConfigPairs reads KEY=VALUE arguments; KEY= removes the key.
func liveConfigPairs(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, fmt.Errorf("no KEY=VALUE given (keys: %s)", strings.Join(wire.LiveConfigKeys[:], ", "))
	}
	set := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not KEY=VALUE", p)
		}
		if v != "" {
			if _, err := wire.ParseLiveConfig(k, v); err != nil {
				return nil, err
			}
		}
		set[k] = v
	}
	return set, nil
}
