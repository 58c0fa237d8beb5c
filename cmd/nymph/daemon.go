package main

import (
	"context"
	"fmt"
)

func runDaemon(_ context.Context, env *cliEnv, _ []string) int {
	fmt.Fprintln(env.stderr, "nymph daemon: not built yet")
	return 1
}
