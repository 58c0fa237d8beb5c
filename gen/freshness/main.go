// Command freshness fails when a checked-in generated file is stale: it
// regenerates the codecs of every package under wirecore/ (each
// `//go:generate` line that writes a file with `-o`: go tool msgp, or
// gen/codecs) and the golden wire vectors
// into a temporary directory and compares them, byte for byte, with the
// files in the tree. It needs no version-control state, so it works on a
// fresh clone or an unpacked archive.
//
// Usage (from the module root): go run ./gen/freshness
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/nymphd/nymph/gen/goldens/vectors"
)

func main() {
	root := flag.String("root", "wirecore", "tree whose go:generate msgp lines are checked")
	goldenDir := flag.String("goldens", "wirecore/wire/testdata", "directory holding the golden vectors")
	flag.Parse()
	stale, err := check(context.Background(), *root, *goldenDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "freshness:", err)
		os.Exit(1)
	}
	if len(stale) > 0 {
		for _, s := range stale {
			fmt.Fprintln(os.Stderr, "stale:", s)
		}
		fmt.Fprintln(os.Stderr, "freshness: generated files are out of date; run `make gen`")
		os.Exit(1)
	}
	fmt.Println("freshness: generated files are up to date")
}

func check(ctx context.Context, root, goldenDir string) ([]string, error) {
	tmp, err := os.MkdirTemp("", "nymph-freshness-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	var stale []string
	packages := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		jobs, err := generateLines(p)
		if err != nil || len(jobs) == 0 {
			return err
		}
		packages++
		s, err := checkCodecs(ctx, p, jobs, tmp)
		stale = append(stale, s...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if packages == 0 {
		return nil, fmt.Errorf("no go:generate -o lines under %s", root)
	}
	g, err := checkGoldens(goldenDir)
	if err != nil {
		return nil, err
	}
	return append(stale, g...), nil
}

// genJob is one `//go:generate CMD ARGS... -o OUT` line.
type genJob struct {
	args []string // the command and its arguments, -o excluded
	out  string   // the checked-in output, relative to the package
}

// generateLines reads the go:generate directives of a package that write
// their output with -o.
func generateLines(dir string) ([]genJob, error) {
	srcs, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var jobs []genJob
	for _, src := range srcs {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 || fields[0] != "//go:generate" || !slices.Contains(fields, "-o") {
				continue
			}
			var job genJob
			for i := 1; i < len(fields); i++ {
				if fields[i] == "-o" && i+1 < len(fields) {
					job.out = fields[i+1]
					i++
					continue
				}
				job.args = append(job.args, fields[i])
			}
			if job.out == "" {
				f.Close()
				return nil, fmt.Errorf("%s: go:generate line with -o but no file after it", src)
			}
			jobs = append(jobs, job)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", src, err)
		}
	}
	return jobs, nil
}

// checkCodecs runs each directive as go generate would (in the package
// directory), writing to a file of the same base name in tmp — msgp derives
// identifiers from the output's base name.
func checkCodecs(ctx context.Context, dir string, jobs []genJob, tmp string) ([]string, error) {
	var stale []string
	for _, job := range jobs {
		pkgTmp, err := os.MkdirTemp(tmp, "pkg-")
		if err != nil {
			return nil, err
		}
		out := filepath.Join(pkgTmp, filepath.Base(job.out))
		args := append(slices.Clone(job.args[1:]), "-o", out)
		cmd := exec.CommandContext(ctx, job.args[0], args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s %s in %s: %w\n%s", job.args[0], strings.Join(args, " "), dir, err, stderr.String())
		}
		if s, err := differs(filepath.Join(dir, job.out), out); err != nil {
			return nil, err
		} else if s != "" {
			stale = append(stale, s)
		}
	}
	return stale, nil
}

// checkGoldens compares every rendered golden file with the tree, and
// flags golden-looking files that no vector produces any more.
func checkGoldens(dir string) ([]string, error) {
	files, err := vectors.Render()
	if err != nil {
		return nil, err
	}
	var stale []string
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(dir, name)
		have, err := os.ReadFile(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			stale = append(stale, p+" (missing)")
		case err != nil:
			return nil, err
		case !bytes.Equal(have, files[name]):
			stale = append(stale, p+" (differs from the vectors)")
		}
	}
	for _, pat := range []string{"*.msgpack", "*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			if _, ok := files[filepath.Base(p)]; !ok {
				stale = append(stale, p+" (no vector produces it)")
			}
		}
	}
	return stale, nil
}

// differs compares a checked-in file with its regenerated twin.
func differs(checkedIn, fresh string) (string, error) {
	want, err := os.ReadFile(fresh)
	if err != nil {
		return "", fmt.Errorf("read regenerated %s: %w", fresh, err)
	}
	have, err := os.ReadFile(checkedIn)
	if errors.Is(err, os.ErrNotExist) {
		return checkedIn + " (missing)", nil
	}
	if err != nil {
		return "", err
	}
	if !bytes.Equal(have, want) {
		return checkedIn + " (differs from its go:generate output)", nil
	}
	return "", nil
}
