package main

import (
	"context"
	"fmt"
)

func runServe(_ context.Context, env *cliEnv, _ []string) int {
	fmt.Fprintln(env.stderr, "nymph serve: not built yet")
	return 1
}
