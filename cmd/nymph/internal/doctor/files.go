package doctor

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nymphd/nymph/hostio/instancelock"
	"github.com/nymphd/nymph/hostio/secretfile"
	"github.com/nymphd/nymph/wirecore/identity"
)

// TokenFile checks a bearer token file as the daemon and the relay read
// it (secretfile.ReadToken): present, private, one line. what names the
// setting in messages ("[server] token_file", "--token-file"); an empty
// path is a skip saying why (none).
func TokenFile(what, path, none string) func(context.Context) Result {
	return func(context.Context) Result {
		if path == "" {
			return Skip("%s", none)
		}
		if _, err := secretfile.ReadToken(path); err != nil {
			return secretFailure(what, path, err, "write the bearer the control plane gave this host into it, one line, mode 0600")
		}
		return OK("%s %s: private, one line", what, path)
	}
}

// IdentityKey checks the host's identity key as the daemon reads it: a
// private file holding one line that decodes to an Ed25519 seed.
func IdentityKey(enabled bool, path string) func(context.Context) Result {
	return func(context.Context) Result {
		if !enabled {
			return Skip("[identity] is not enabled: this daemon sends a bearer, not signatures (nymph daemon join makes a key)")
		}
		if path == "" {
			return Fail("join the host again (nymph daemon join), which writes both", "[identity] is enabled but names no key_file")
		}
		text, err := secretfile.ReadToken(path)
		if err != nil {
			return secretFailure("[identity] key_file", path, err, "join the host again with a new token from nymph ctl token (nymph daemon join)")
		}
		key, err := identity.DecodeSeed([]byte(text))
		if err != nil {
			return Fail("join the host again with a new token from nymph ctl token (nymph daemon join)",
				"[identity] key_file %s does not decode: %v", path, err)
		}
		return OK("[identity] key_file %s: private, key %s", path, identity.KeyID(key.Public().(ed25519.PublicKey)))
	}
}

// secretFailure turns a refused secret file into a failure whose fix is
// the chmod for a shared one, create for a missing one, else missing.
func secretFailure(what, path string, err error, missing string) Result {
	var shared *secretfile.SharedError
	switch {
	case errors.As(err, &shared):
		return Fail("chmod 600 "+path, "%s %s has group or world access (mode %04o)", what, path, shared.Mode.Perm())
	case errors.Is(err, fs.ErrNotExist):
		return Fail(missing, "%s %s does not exist", what, path)
	}
	return Fail(missing, "%s %s: %v", what, path, err)
}

// Workdir checks that the daemon can create a file in its workdir root,
// by creating one and removing it. A root that does not exist yet is a
// warning when it can be created (the daemon creates it at start), a
// failure when not; doctor itself creates nothing there.
func Workdir(dir string) func(context.Context) Result {
	return func(context.Context) Result {
		fix := fmt.Sprintf("give the daemon a workdir it can write ([runtime] workdir, --workdir), or: mkdir -p %s && chown $(id -u) %s", dir, dir)
		st, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			parent := existingParent(dir)
			if err := tryWrite(parent); err != nil {
				return Fail(fix, "[runtime] workdir %s does not exist, and %s does not let this user create it: %v", dir, parent, err)
			}
			return Warn("nothing to do: the daemon creates it at start (mkdir -p "+dir+" to see it now)",
				"[runtime] workdir %s does not exist yet", dir)
		case err != nil:
			return Fail(fix, "[runtime] workdir %s: %v", dir, err)
		case !st.IsDir():
			return Fail(fix, "[runtime] workdir %s is not a directory", dir)
		}
		if err := tryWrite(dir); err != nil {
			return Fail(fix, "[runtime] workdir %s is not writable: %v", dir, err)
		}
		return OK("[runtime] workdir %s is writable", dir)
	}
}

// tryWrite creates a file in dir and removes it.
func tryWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".nymph-doctor-*")
	if err != nil {
		return fmt.Errorf("create a file in %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// existingParent is the nearest ancestor of dir that exists.
func existingParent(dir string) string {
	p := filepath.Clean(dir)
	for {
		parent := filepath.Dir(p)
		if _, err := os.Stat(parent); err == nil || parent == p {
			return parent
		}
		p = parent
	}
}

// Instance checks that no other process holds dir's instance lock (what
// and hint as instancelock.Acquire takes them): it takes the lock and
// lets it go at once. Held is a warning naming the holder, since doctor
// is often run beside the daemon or relay it diagnoses. A directory that
// does not exist holds no lock and is not created.
func Instance(dir, what, hint, program string) func(context.Context) Result {
	return func(context.Context) Result {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return Skip("%s %s does not exist: no %s runs there", what, dir, program)
		}
		lock, err := instancelock.Acquire(dir, what, hint)
		var held *instancelock.HeldError
		switch {
		case errors.As(err, &held):
			holder := "another process"
			if held.PID > 0 {
				holder = fmt.Sprintf("pid %d (%s)", held.PID, held.Command)
			}
			return Warn(fmt.Sprintf("nothing to do if that is the %s you meant to run; a second one there is refused: %s", program, hint),
				"%s %s is in use by %s", what, dir, holder)
		case err != nil:
			return Skip("cannot take the lock of %s %s: %v", what, dir, err)
		}
		if err := lock.Release(); err != nil {
			return Warn("run doctor again: the kernel drops the lock when doctor exits", "%s %s: release the lock: %v", what, dir, err)
		}
		return OK("%s %s is free: no other %s holds it", what, dir, program)
	}
}
