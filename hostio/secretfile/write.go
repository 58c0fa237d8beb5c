package secretfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces the file at path with data, privately (WriteFile with
// mode 0600), creating its directory 0700 when absent.
func Write(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	return WriteFile(path, data, 0o600)
}

// WriteFile replaces the file at path with data atomically: the bytes go
// to a temporary file beside it, created with mode before any byte is
// written (so no umask widens a private file, and no reader ever sees a
// secret under a wider mode), synced, and renamed over path; then the
// directory is synced. A reader sees the old content or the new, never a
// part, and a crash leaves nothing half-written under path. It is the one
// way nymph replaces a file others read while it runs (keys, CAs,
// certificates, configs, a relay's upstream file).
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
