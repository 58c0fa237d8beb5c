// Command codecs generates the msgp codecs of one wire source file and then
// makes their string reads reuse what a reused value already holds.
//
// msgp's generated UnmarshalMsg allocates a new string for every str it
// reads, which is half the cost of decoding a message. When a value is
// decoded again and again (a poll loop, a control plane decoding a worker's
// polls), most strings repeat: the worker id, the queue, "running", the ids
// of runs still in flight. So each `x, bts, err = msgp.ReadStringBytes(bts)`
// whose destination is a field of the receiver becomes
// `x, bts, err = reuseString(bts, x)`, which keeps x when the bytes are
// equal and allocates only when they differ. The helper lives in the wire
// package; a fresh value decodes exactly as before.
//
// Usage, from a go:generate line in the package directory:
//
//	go run ../../gen/codecs -file hello.go -o hello_gen.go
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
)

func main() {
	src := flag.String("file", "", "Go source file holding the types")
	out := flag.String("o", "", "generated file to write")
	flag.Parse()
	if *src == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: codecs -file SRC.go -o SRC_gen.go")
		os.Exit(2)
	}
	if err := generate(context.Background(), *src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "codecs:", err)
		os.Exit(1)
	}
}

func generate(ctx context.Context, src, out string) error {
	cmd := exec.CommandContext(ctx, "go", "tool", "msgp", "-tests=false", "-file", src, "-o", out)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go tool msgp -file %s: %w\n%s", src, err, log.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("read %s: %w", out, err)
	}
	if err := os.WriteFile(out, reuseStrings(b), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// receiverStringRead matches a generated string read whose destination is
// reached from the receiver z (a field, a pointer field, a slice element).
var receiverStringRead = regexp.MustCompile(`(?m)^(\s*)(\*?z\.[A-Za-z0-9_.\[\]]+), bts, err = msgp\.ReadStringBytes\(bts\)$`)

func reuseStrings(src []byte) []byte {
	return receiverStringRead.ReplaceAll(src, []byte("${1}${2}, bts, err = reuseString(bts, ${2})"))
}
