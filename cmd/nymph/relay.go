package main

import (
	"context"
	"fmt"
)

func runRelay(_ context.Context, env *cliEnv, _ []string) int {
	fmt.Fprintln(env.stderr, "nymph relay: not built yet")
	return 1
}
