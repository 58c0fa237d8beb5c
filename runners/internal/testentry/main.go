// Command testentry is a stand-in for the Python entry program in the
// runners' tests: it follows the workdir contract and does what its
// args.msgpack says, so the tests need no Python on the host.
//
// args.msgpack holds plain text, "<verb>[:<param>]":
//
//	ok:<text>      write <text> to result.msgpack, exit 0
//	fail:<text>    write error.json {type ValueError, message <text>}, exit 1
//	sleep:<secs>   write started, sleep, then behave as ok:slept
//	stubborn       write started, ignore SIGTERM, sleep forever
//	exit0          exit 0 writing nothing
//	exit:<n>       exit n writing nothing
//	env            write the DREAMLAKE_* variables, cwd and uid to result.msgpack
//	print:<text>   print <text> on stdout and stderr, then behave as ok:<text>
//	getenv:<name>  write the value of variable <name> to result.msgpack
//	stamp          write the start time (Unix nanoseconds) to result.msgpack
//
// It reads the workdir from DREAMLAKE_WORKDIR, else the current directory.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	start := time.Now()
	dir := os.Getenv("DREAMLAKE_WORKDIR")
	if dir == "" {
		dir, _ = os.Getwd()
	}
	args, err := os.ReadFile(filepath.Join(dir, "args.msgpack"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testentry:", err)
		os.Exit(2)
	}
	verb, param, _ := strings.Cut(strings.TrimSpace(string(args)), ":")
	switch verb {
	case "ok":
		succeed(dir, param)
	case "fail":
		writeJSON(dir, map[string]string{"type": "ValueError", "message": param, "traceback": "Traceback: testentry"})
		os.Exit(1)
	case "sleep":
		started(dir)
		secs, _ := strconv.ParseFloat(param, 64)
		time.Sleep(time.Duration(secs * float64(time.Second)))
		succeed(dir, "slept")
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		started(dir)
		for {
			time.Sleep(time.Hour)
		}
	case "exit0":
		os.Exit(0)
	case "exit":
		n, _ := strconv.Atoi(param)
		os.Exit(n)
	case "env":
		var lines []string
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "DREAMLAKE_") {
				lines = append(lines, kv)
			}
		}
		sort.Strings(lines)
		cwd, _ := os.Getwd()
		lines = append(lines, "cwd="+cwd, "uid="+strconv.Itoa(os.Getuid()))
		succeed(dir, strings.Join(lines, "\n"))
	case "print":
		fmt.Println(param)
		fmt.Fprintln(os.Stderr, param)
		succeed(dir, param)
	case "getenv":
		succeed(dir, os.Getenv(param))
	case "stamp":
		succeed(dir, strconv.FormatInt(start.UnixNano(), 10))
	default:
		fmt.Fprintln(os.Stderr, "testentry: unknown verb", verb)
		os.Exit(2)
	}
}

func succeed(dir, text string) {
	if err := os.WriteFile(filepath.Join(dir, "result.msgpack"), []byte(text), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "testentry:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func started(dir string) {
	_ = os.WriteFile(filepath.Join(dir, "started"), []byte(strconv.Itoa(os.Getpid())), 0o600)
}

func writeJSON(dir string, v any) {
	b, _ := json.Marshal(v)
	if err := os.WriteFile(filepath.Join(dir, "error.json"), b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "testentry:", err)
		os.Exit(2)
	}
}
