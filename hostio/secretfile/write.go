package secretfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces the file at path with data, privately and atomically: the
// bytes go to a temporary file created 0600 beside it, are synced, and the
// temporary file is renamed over path, so a reader sees the old content or
// the new, never a part, and a crash leaves no half-written secret under
// path. The directory is created 0700 when absent.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write private file %s: %w", path, err)
	}
	return nil
}
