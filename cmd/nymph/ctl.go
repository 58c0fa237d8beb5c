package main

import (
	"context"
	"fmt"
)

func runCtl(_ context.Context, env *cliEnv, _ []string) int {
	fmt.Fprintln(env.stderr, "nymph ctl: not built yet")
	return 1
}
