//go:build unix

package relay

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenBeneathStaysBeneath(t *testing.T) {
	top := t.TempDir()
	prefix := filepath.Join(top, "prefix")
	for _, d := range []string{prefix + "/m/spool/req", top + "/outside"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{prefix + "/m/spool/req/a.frame", top + "/outside/secret"} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		prefix + "/out":              "../outside",      // a directory outside
		prefix + "/m/spool/lnk":      "req",             // a directory inside
		prefix + "/m/spool/req/file": "a.frame",         // the last component
		prefix + "/m/esc":            top + "/outside/", // absolute, outside
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	dirfd, err := unix.Open(prefix, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	for _, tc := range []struct {
		rel  string
		want error // nil: opens
	}{
		{".", nil},
		{"m/spool/req/a.frame", nil},
		{"./m//spool/req/", nil},
		{"m/spool/req/../req/a.frame", unix.EXDEV},
		{"../prefix/m", unix.EXDEV},
		{"out/secret", unix.ELOOP},
		{"m/esc/secret", unix.ELOOP},
		{"m/spool/lnk/a.frame", unix.ELOOP},
		{"m/spool/req/file", unix.ELOOP},
		{"m/spool/req/none", unix.ENOENT},
		{"m/spool/req/a.frame/x", unix.ENOTDIR},
	} {
		fd, err := openBeneath(dirfd, tc.rel, flags, 0)
		if err == nil {
			unix.Close(fd)
		}
		if !errors.Is(err, tc.want) && (err != nil || tc.want != nil) {
			t.Errorf("openBeneath(%q) = %v, want %v", tc.rel, err, tc.want)
		}
	}
}
