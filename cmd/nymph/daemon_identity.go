package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nymphd/nymph/hostio/daemonconfig"
	"github.com/nymphd/nymph/hostio/daemonloop"
	"github.com/nymphd/nymph/hostio/instancelock"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/hostio/signer"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/identity"
)

// identityKeyFile is the key file's name beside the config nymph daemon
// join writes, when [identity] key_file names none.
const identityKeyFile = "identity.key"

// hostIdentity is the daemon's signing key at run time.
type hostIdentity struct {
	signer  *signer.Transport
	path    string
	revoked chan string
}

// loadIdentity reads the host key when [identity] is enabled and wraps tr
// in a signer; nil without an identity (a bearer-only daemon).
func loadIdentity(cfg daemonconfig.Config, tr transport.Transport) (*hostIdentity, error) {
	if !cfg.Identity.Enabled {
		return nil, nil
	}
	path := cfg.Identity.KeyFile
	if path == "" {
		return nil, errors.New("[identity] enabled needs key_file (nymph daemon join writes both)")
	}
	key, err := readKey(path)
	if err != nil {
		return nil, err
	}
	id := &hostIdentity{path: path, revoked: make(chan string, 1)}
	id.signer, err = signer.New(signer.Options{Next: tr, Key: key, ServerURL: cfg.Server.URL, Random: rand.Reader,
		Revoked: func(msg string) { id.revoked <- msg }})
	if err != nil {
		return nil, fmt.Errorf("[identity]: %w", err)
	}
	return id, nil
}

// readKey reads an identity file: private (mode 0600), one line, a seed.
func readKey(path string) (ed25519.PrivateKey, error) {
	text, err := secretfile.ReadToken(path)
	if err != nil {
		return nil, fmt.Errorf("[identity] key_file: %w", err)
	}
	key, err := identity.DecodeSeed([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("[identity] key_file %s: %w", path, err)
	}
	return key, nil
}

// rotator is the loop's KeyRotator; nil without an identity.
func (id *hostIdentity) rotator() daemonloop.KeyRotator {
	if id == nil {
		return nil
	}
	return id
}

// revokedChan is the loop's Revoked channel; nil (never ready) without one.
func (id *hostIdentity) revokedChan() <-chan string {
	if id == nil {
		return nil
	}
	return id.revoked
}

// RotateKey makes a new key, has the control plane enroll it and keeps it
// in the key file.
func (id *hostIdentity) RotateKey(ctx context.Context, workerID string) (string, error) {
	_, next, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate a key: %w", err)
	}
	return id.signer.Rotate(ctx, workerID, next, func(k ed25519.PrivateKey) error {
		return secretfile.Write(id.path, identity.EncodeSeed(k))
	})
}

// lockStateDir holds the daemon's state directory ([runtime] workdir)
// for this process. Another daemon holding it is an error; a directory
// that cannot be created here (the default one, for a user who is not
// root) is not, as before: the lock then protects nothing to share.
func lockStateDir(cfg daemonconfig.Config) (*instancelock.Lock, error) {
	dir := cfg.Runtime.Workdir
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, nil
	}
	lock, err := instancelock.Acquire(dir, "daemon state directory", "give this daemon another [runtime] workdir (--workdir)")
	if errors.Is(err, instancelock.ErrHeld) {
		return nil, err
	}
	if err != nil {
		return nil, nil
	}
	return lock, nil
}

// keyPathBeside is the key file join writes beside the config at path.
func keyPathBeside(configPath string) string {
	return filepath.Join(filepath.Dir(configPath), identityKeyFile)
}
