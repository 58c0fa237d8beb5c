// Command goldens writes the golden wire vectors of protocol "1" (defined in
// gen/goldens/vectors) into a directory: <name>.msgpack holds the encoding,
// <name>.json the field map an independent decoder must read from it.
//
// Usage: go run ./gen/goldens -out wirecore/wire/testdata
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nymphd/nymph/gen/goldens/vectors"
)

func main() {
	out := flag.String("out", "wirecore/wire/testdata", "directory to write the golden files into")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "goldens:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	files, err := vectors.Render()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}
