package plane_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// TestPure holds the package to the wirecore rule: no I/O imports, no
// clock, no sleeping, no goroutines.
func TestPure(t *testing.T) {
	forbidden := map[string]bool{"os": true, "net": true, "net/http": true, "os/exec": true, "os/signal": true,
		"syscall": true, "golang.org/x/sys/unix": true, "math/rand": true, "unsafe": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if forbidden[path] || strings.HasPrefix(path, "golang.org/x/sys") {
				t.Errorf("%s imports %s", f, path)
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement at %s", f, fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" {
					switch n.Sel.Name {
					case "Now", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick", "Since", "Until":
						t.Errorf("%s: time.%s at %s", f, n.Sel.Name, fset.Position(n.Pos()))
					}
				}
			}
			return true
		})
	}
}

// TestIDs checks the id shapes: 24-hex worker ids, stable per machine_id.
func TestIDs(t *testing.T) {
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{1})})
	hello := func(req plane.RequestID, machine string) string {
		t.Helper()
		eff := p.Step(t0, plane.Hello{Auth: bearer, Req: req, Body: helloReq(machine)})
		r := eff[len(eff)-1].(plane.Reply)
		return *r.Body.(wire.HelloResponse).WorkerID
	}
	a, b, a2 := hello(1, "m1"), hello(2, "m2"), hello(3, "m1")
	if len(a) != 24 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("worker id %q is not 24 hex digits", a)
	}
	if a == b || a != a2 {
		t.Errorf("ids m1=%s m2=%s m1 again=%s: want same id per machine, distinct across", a, b, a2)
	}
}

func TestMissingHelloFieldRejectsNonMaps(t *testing.T) {
	for _, raw := range [][]byte{nil, {0xc0}, msgp.AppendString(nil, "hi"), {0x81}} {
		if f, err := plane.MissingHelloField(raw); err == nil {
			t.Errorf("MissingHelloField(%x) = %q, nil; want an error", raw, f)
		}
	}
}

func helloReq(machine string) wire.HelloRequest {
	one := "1"
	return wire.HelloRequest{MachineID: machine, Label: machine, Tags: []string{"host=local"},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, MaxInvocations: 4},
		Versions:     wire.Versions{Daemon: &one, Protocol: &one}}
}

// BenchmarkDecisions measures the pure core on the hot path of a fleet of
// 2,000 parked daemons: an operator exec wakes one daemon's parked poll,
// the daemon posts its result, and polls again (three events per op).
// "cursor" is the same fleet with the cursor extension agreed: every
// command is kept until the next poll's cursor confirms it.
func BenchmarkDecisions(b *testing.B) {
	for _, exts := range [][]string{nil, {wire.ExtCursor}} {
		name := "plain"
		if exts != nil {
			name = "cursor"
		}
		b.Run(name, func(b *testing.B) { benchDecisions(b, exts) })
	}
}

func benchDecisions(b *testing.B, exts []string) {
	const fleet = 2000
	p := plane.New(plane.Config{Entropy: rand.NewChaCha8([32]byte{2})})
	now := t0
	ids := make([]string, fleet)
	cursors := make([]*string, fleet)
	var req plane.RequestID
	for i := range ids {
		req++
		h := helloReq(fmt.Sprintf("m%d", i))
		h.Extensions = exts
		eff := p.Step(now, plane.Hello{Auth: bearer, Req: req, Body: h})
		ids[i] = *eff[len(eff)-1].(plane.Reply).Body.(wire.HelloResponse).WorkerID
		req++
		p.Step(now, plane.Poll{Auth: bearer, Req: req, Body: wire.PollRequest{WorkerID: ids[i], TimeoutS: 20}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		k := i % fleet
		w := ids[k]
		req++
		eff := p.Step(now, plane.EnqueueExec{Req: req, WorkerID: w, Body: operator.ExecRequest{Command: "true"}})
		var execID string
		for _, e := range eff {
			if r, ok := e.(plane.Reply); ok {
				switch body := r.Body.(type) {
				case operator.ExecAccepted:
					execID = body.ExecID
				case wire.PollResponse:
					cursors[k] = body.Cursor
				}
			}
		}
		req++
		p.Step(now, plane.ExecResult{Auth: bearer, Req: req, ExecID: execID})
		req++
		p.Step(now, plane.Poll{Auth: bearer, Req: req, Body: wire.PollRequest{WorkerID: w, TimeoutS: 20, Cursor: cursors[k]}})
	}
	b.ReportMetric(float64(3*b.N)/time.Since(start).Seconds(), "events/s")
}

// bearer is the Auth of a request that carried a valid daemon bearer.
var bearer = plane.Auth{Bearer: true}
