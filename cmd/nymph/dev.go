package main

import (
	"context"
	"fmt"
)

func runDev(_ context.Context, env *cliEnv, _ []string) int {
	fmt.Fprintln(env.stderr, "nymph dev: not built yet")
	return 1
}
