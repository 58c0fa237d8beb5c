package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/nymphd/nymph/runners"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Redacted replaces the registry secret wherever it appears in captured
// output.
const Redacted = "[REDACTED]"

// LoginArgv is the `docker login` argv (without the client binary): the
// secret goes on stdin, never here.
func LoginArgv(auth wire.RegistryAuth) []string {
	return []string{"login", auth.Server, "--username", auth.Username, "--password-stdin"}
}

// Password resolves the registry secret: the variable named by
// password_env wins when it is set and not empty; otherwise the literal
// password.
func Password(auth wire.RegistryAuth, lookup func(string) (string, bool)) (string, error) {
	if auth.PasswordEnv != "" {
		if v, ok := lookup(auth.PasswordEnv); ok && v != "" {
			return v, nil
		}
	}
	if auth.Password != "" {
		return auth.Password, nil
	}
	if auth.PasswordEnv != "" {
		return "", fmt.Errorf("registry_auth.password_env %s is not set and there is no password", auth.PasswordEnv)
	}
	return "", errors.New("registry_auth has neither password nor password_env")
}

// Redact removes every occurrence of secret from s.
func Redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, Redacted)
}

// login runs `docker login` with the secret on stdin; its error carries
// the client's output with the secret redacted.
func (r *Runner) login(ctx context.Context, auth wire.RegistryAuth, env []string) error {
	if auth.Server == "" || auth.Username == "" {
		return errors.New("docker login: registry_auth needs server and username")
	}
	secret, err := Password(auth, r.opt.LookupEnv)
	if err != nil {
		return fmt.Errorf("docker login %s: %w", auth.Server, err)
	}
	cmd := exec.CommandContext(ctx, r.opt.Docker, LoginArgv(auth)...)
	cmd.WaitDelay = runners.ClientWaitDelay
	cmd.Env = env
	cmd.Stdin = strings.NewReader(secret)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker login %s: %s: %s", auth.Server, Redact(err.Error(), secret),
			Redact(strings.TrimSpace(out.String()), secret))
	}
	return nil
}
