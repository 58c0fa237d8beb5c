// Package transcript reads the arguments of the cores' transcript cases
// (wirecore/daemon and wirecore/plane testdata, run by
// cockroachdb/datadriven) in the one grammar both use: key=value, a value
// in Go quotes when it holds spaces, a list written a,b.
//
// It takes no clock, network or process of its own (datadriven reads the
// files), so the transcripts run under js/wasm and wasip1 with the cores.
// Only _test.go files import it.
package transcript

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// RunAll runs every transcript (a .txt file) below testdata, each with the
// run function of a fresh harness; anything else there, such as go test's
// fuzz corpus, is skipped.
func RunAll(t *testing.T, fresh func() func(*testing.T, *datadriven.TestData) string) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a transcript", path)
		}
		datadriven.RunTest(t, path, fresh())
	})
}

// JoinQuoted undoes datadriven's split of a quoted value at its spaces
// (err="status 503" arrives as err="status and 503") and unquotes it. It
// refuses datadriven's own list syntax (key=(a, b)) and a key given twice.
func JoinQuoted(args []datadriven.CmdArg) ([]datadriven.CmdArg, error) {
	out := make([]datadriven.CmdArg, 0, len(args))
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a.Vals) > 1 {
			return nil, fmt.Errorf("%s: a list is written a,b", a)
		}
		if len(a.Vals) == 1 && strings.HasPrefix(a.Vals[0], `"`) {
			v := a.Vals[0]
			for !quotedPrefix(v) && i+1 < len(args) {
				i++
				v += " " + args[i].String()
			}
			u, err := strconv.Unquote(v)
			if err != nil {
				return nil, fmt.Errorf("bad quoting in %s=%s", a.Key, v)
			}
			a.Vals = []string{u}
		}
		if seen[a.Key] {
			return nil, fmt.Errorf("%s given twice", a.Key)
		}
		seen[a.Key] = true
		out = append(out, a)
	}
	return out, nil
}

// quotedPrefix reports whether v starts with a complete quoted string.
func quotedPrefix(v string) bool {
	_, err := strconv.QuotedPrefix(v)
	return err == nil
}
