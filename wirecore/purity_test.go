package wirecore

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
)

// forbiddenImport reports why importing p breaks purity, or "".
func forbiddenImport(p string) string {
	switch {
	case p == "os" || strings.HasPrefix(p, "os/"):
		return "operating-system access"
	case p == "net" || p == "net/http" || strings.HasPrefix(p, "net/http/"):
		return "network I/O"
	case p == "syscall" || p == "golang.org/x/sys" || strings.HasPrefix(p, "golang.org/x/sys/"):
		return "system calls"
	case p == "math/rand":
		return "a global random source (take randomness as a value)"
	}
	return ""
}

// forbiddenTime are the package-time functions that read the clock, sleep
// or arm a timer.
var forbiddenTime = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"Tick": true, "NewTimer": true, "NewTicker": true, "AfterFunc": true,
}

// allowedRandV2 are the names of math/rand/v2 that do not touch its global
// generator: constructors of seeded generators and their types.
var allowedRandV2 = map[string]bool{
	"New": true, "NewPCG": true, "NewChaCha8": true, "NewZipf": true,
	"Rand": true, "Source": true, "PCG": true, "ChaCha8": true, "Zipf": true,
}

// violations parses one Go source file and lists every purity violation.
func violations(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	report := func(pos token.Pos, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s", fset.Position(pos), fmt.Sprintf(format, args...)))
	}
	local := map[string]string{} // name in this file -> import path, for time and math/rand/v2
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return nil, err
		}
		if why := forbiddenImport(p); why != "" {
			report(imp.Pos(), "imports %q (%s)", p, why)
		}
		if p != "time" && p != "math/rand/v2" {
			continue
		}
		name := path.Base(p)
		if p == "math/rand/v2" {
			name = "rand"
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if name == "." {
			report(imp.Pos(), "dot-imports %q, which hides its calls from this check", p)
			continue
		}
		local[name] = p
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.GoStmt:
			report(x.Pos(), "starts a goroutine")
		case *ast.SelectorExpr:
			id, ok := x.X.(*ast.Ident)
			if !ok {
				break
			}
			switch local[id.Name] {
			case "time":
				if forbiddenTime[x.Sel.Name] {
					report(x.Pos(), "uses time.%s (take time as a value)", x.Sel.Name)
				}
			case "math/rand/v2":
				if !allowedRandV2[x.Sel.Name] {
					report(x.Pos(), "uses the global generator of math/rand/v2 (%s.%s)", id.Name, x.Sel.Name)
				}
			}
		}
		return true
	})
	return out, nil
}

// TestPurity walks every non-test Go file under wirecore/ (this directory).
func TestPurity(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := fs.WalkDir(os.DirFS("."), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		v, err := violations(fset, p, src)
		if err != nil {
			return err
		}
		for _, msg := range v {
			t.Error(msg)
		}
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 { // wire alone has more; fewer means the walk went wrong
		t.Fatalf("checked only %d files", files)
	}
	t.Logf("checked %d files", files)
}

// TestPurityCheckCatches: the checker finds each kind of violation, however
// the import is named, and lets the pure uses through.
func TestPurityCheckCatches(t *testing.T) {
	cases := []struct {
		src  string
		want []string // substrings, one per expected violation, in order
	}{
		{`import "os"`, []string{`imports "os"`}},
		{`import x "net"`, []string{`imports "net"`}},
		{`import "net/http"`, []string{`imports "net/http"`}},
		{`import "os/exec"`, []string{`imports "os/exec"`}},
		{`import "os/signal"`, []string{`imports "os/signal"`}},
		{`import "syscall"`, []string{`imports "syscall"`}},
		{`import "golang.org/x/sys/unix"`, []string{`imports "golang.org/x/sys/unix"`}},
		{`import "math/rand"`, []string{`imports "math/rand"`}},
		{`import "time"; var _ = time.Now()`, []string{"time.Now"}},
		{`import clock "time"; func f() { clock.Sleep(1) }`, []string{"time.Sleep"}},
		{`import "time"; var f = time.After`, []string{"time.After"}},
		{`import "time"; func f() { time.NewTimer(1); time.NewTicker(1); time.Tick(1); time.AfterFunc(1, nil) }`,
			[]string{"time.NewTimer", "time.NewTicker", "time.Tick", "time.AfterFunc"}},
		{`import "time"; var _ = time.Since(time.Time{})`, []string{"time.Since"}},
		{`import . "time"`, []string{"dot-imports"}},
		{`import "math/rand/v2"; var _ = rand.IntN(3)`, []string{"global generator"}},
		{`import r "math/rand/v2"; var _ = r.Uint64()`, []string{"global generator"}},
		{`func f() { go f() }`, []string{"starts a goroutine"}},
		{`import ("time"; "math/rand/v2"; "net/url"); var d = time.Duration(3) * time.Second; var g = rand.New(rand.NewPCG(1, 2)); var u url.URL; func f(t time.Time) time.Time { return t.Add(d) }`, nil},
	}
	for _, c := range cases {
		got, err := violations(token.NewFileSet(), "x.go", []byte("package x\n"+c.src+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %d violations %q, want %d", c.src, len(got), got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: violation %q lacks %q", c.src, got[i], w)
			}
		}
	}
}
