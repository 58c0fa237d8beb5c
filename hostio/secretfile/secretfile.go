// Package secretfile decides what counts as private on disk, and reads the
// token files nymph is handed.
//
// A file or directory is private when neither group nor others have any
// access to it: mode&077 == 0, the rule OpenSSH applies to private keys and
// PostgreSQL to its data directory. One rule holds for every token file
// (serve's daemon, relay and admin tokens, the daemon's bootstrap bearer,
// the relay's own token, ctl's admin token) and for serve's data directory;
// a refusal names the path and the chmod that fixes it.
//
// It decides that rule, what a token file holds (one line, trimmed of
// surrounding whitespace, at most MaxToken bytes), how a private file or
// directory is made: created 0600 or 0700 before anything is written to it,
// so no umask ever widens it, and how a file is replaced atomically, private
// or not (WriteFile). It does not decide which files hold secrets,
// what a token is for, or when a token file is read again: its callers do.
package secretfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// MaxToken bounds a token file: a token is short, a larger file is a
// mistake (the wrong file named), not a token.
const MaxToken = 16 << 10

// ErrShared matches every SharedError.
var ErrShared = errors.New("group or others have access")

// ErrEmpty reports a token file that holds nothing but whitespace. A file
// being rewritten (truncated, then written) reads so for a moment.
var ErrEmpty = errors.New("file is empty")

// SharedError reports a file or directory that group or others may access.
type SharedError struct {
	What string // "token file", "data directory"
	Path string
	Mode fs.FileMode
}

func (e *SharedError) Error() string {
	fix := "600"
	if e.Mode.IsDir() {
		fix = "700"
	}
	return fmt.Sprintf("%s %s has group or world access (mode %04o); chmod %s %s", e.What, e.Path, e.Mode.Perm(), fix, e.Path)
}

// Is makes errors.Is(err, ErrShared) hold.
func (e *SharedError) Is(target error) bool { return target == ErrShared }

// private is the rule: no access at all for group or others.
func private(mode fs.FileMode) bool { return mode.Perm()&0o077 == 0 }

// ReadToken reads the token in the file at path: a regular file (a
// symlink to one is fine) that group and others cannot access, holding one
// line of at most MaxToken bytes, trimmed of surrounding whitespace. A file
// of whitespace only is ErrEmpty; one others may access is a SharedError.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("read token file %s: not a regular file (mode %v)", path, st.Mode())
	}
	if !private(st.Mode()) {
		return "", &SharedError{What: "token file", Path: path, Mode: st.Mode()}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxToken+1))
	if err != nil {
		return "", fmt.Errorf("read token file %s: %w", path, err)
	}
	if len(b) > MaxToken {
		return "", fmt.Errorf("read token file %s: larger than %d bytes, not a token", path, MaxToken)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return "", fmt.Errorf("read token file %s: %w", path, ErrEmpty)
	}
	if bytes.ContainsAny(tok, "\r\n\x00") {
		return "", fmt.Errorf("read token file %s: more than one line", path)
	}
	return string(tok), nil
}

// EnsureDir makes path a private directory: created 0700 (parents too)
// when absent; an existing one must be a directory that group and others
// cannot access, else a SharedError naming it as what ("data directory").
func EnsureDir(what, path string) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", what, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("check %s: %w", what, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s: not a directory", what, path)
	}
	if !private(st.Mode()) {
		return &SharedError{What: what, Path: path, Mode: st.Mode()}
	}
	return nil
}

// EnsureFile makes path a private file before anything is written to it:
// created empty with mode 0600 when absent, its content left alone when
// present. An existing file that group or others may access is narrowed to
// 0600 (the caller owns the files it prepares: an older version made it
// so), and narrowed says so.
func EnsureFile(path string) (narrowed bool, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return false, fmt.Errorf("create private file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("create private file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return false, fmt.Errorf("create private file %s: not a regular file (mode %v)", path, st.Mode())
	}
	if private(st.Mode()) {
		return false, nil
	}
	if err := f.Chmod(0o600); err != nil {
		return false, fmt.Errorf("narrow %s to 0600: %w", path, err)
	}
	return true, nil
}
