package payload

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nymphd/nymph/hostio/idpath"
)

// StageFile is the name of an exec's payload inside its staging directory.
const StageFile = "payload"

// Stage puts an exec's payload where its command reads it (the file the
// exec's wire.EnvPayload names): root/<idpath.Name(execID)>/payload,
// read-only. A cached payload (from Fetch) is hard-linked, so a 100 MiB
// payload used by many execs is on disk once — unless the daemon runs as root: a
// file's mode does not bind root, and a command writing through the link
// would change the cache entry under every exec sharing it, so root's
// execs get a copy. Across file systems it is copied too. An inline one
// is written. remove deletes the directory once the exec has ended.
func Stage(root, execID string, inline []byte, cached string) (file string, remove func(), err error) {
	name, err := idpath.Name(execID)
	if err != nil {
		return "", nil, fmt.Errorf("payload: stage exec %q: %w", execID, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", nil, fmt.Errorf("payload: create %s: %w", root, err)
	}
	dir := filepath.Join(root, name)
	// A leftover of a redelivered exec is replaced.
	if err := os.RemoveAll(dir); err != nil {
		return "", nil, fmt.Errorf("payload: clear %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("payload: create %s: %w", dir, err)
	}
	remove = func() { os.RemoveAll(dir) }
	file = filepath.Join(dir, StageFile)
	switch {
	case cached != "":
		err = linkOrCopy(cached, file)
	default:
		err = os.WriteFile(file, inline, 0o400)
	}
	if err != nil {
		remove()
		return "", nil, fmt.Errorf("payload: stage %s: %w", file, err)
	}
	return file, remove, nil
}

// linkOrCopy makes dst a read-only copy of src: a hard link when both are
// on one file system, else a copy.
func linkOrCopy(src, dst string) error {
	if os.Geteuid() != 0 {
		if err := os.Link(src, dst); err == nil {
			return nil
		}
	}
	return CopyFile(src, dst, 0o400)
}

// CopyFile copies src to a new file dst of the given mode, synced.
func CopyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(err, os.Remove(dst))
	}
	return nil
}
