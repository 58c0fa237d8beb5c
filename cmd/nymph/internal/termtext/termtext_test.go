package termtext

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// hostile is the label of the report: a title change and a screen clear.
const hostile = "\x1b]0;pwned\x07\x1b[2J"

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{hostile, `\x1b]0;pwned\a\x1b[2J`},
		{"tab\there\nnext\r", `tab\there\nnext\r`},
		{"\x00nul", `\x00nul`},
		// Each side of every boundary: C0 ends at 0x1f, space prints; '~'
		// prints, DEL does not; C1 ends at U+009F, '¡' prints.
		{"\x1f \x20", `\x1f  `},
		{"~\x7f", `~\x7f`},
		{"\u0080\u009b\u009f\u00a1", `\u0080\u009b\u009f¡`},
		{"\u00a0", `\u00a0`},                     // a space that is not ASCII's
		{"a\u202eb", `a\u202eb`},                 // a bidirectional override
		{"\xff\xfe ok \xc3", `\xff\xfe ok \xc3`}, // invalid UTF-8, byte by byte
		{"\ufffd", "\ufffd"},                     // the replacement character itself prints
		// Kept as they are: printable text of any script, backslashes.
		{"héllo wörld 日本 🙂", "héllo wörld 日本 🙂"},
		{`C:\dir\x1b`, `C:\dir\x1b`},
		{"", ""},
	} {
		if got := Printable(tc.in); got != tc.want {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFprintfEscapesEveryArgumentKind(t *testing.T) {
	var b bytes.Buffer
	Fprintf(&b, "%s|%v|%v|%s|%d\n", hostile, []string{"ok", "\x1b[1m"}, errors.New("bad\x07"), stringer("\x9b"), 7)
	want := `\x1b]0;pwned\a\x1b[2J|[ok \x1b[1m]|bad\a|\x9b|7` + "\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestTables(t *testing.T) {
	now := time.Unix(1000, 0)
	var b bytes.Buffer
	WriteWorkers(&b, []operator.Worker{
		{ID: "w1", Label: "a", State: "active", Versions: map[string]any{"daemon": "1.4.0", "arch": "x86_64"},
			Queues: []string{"gpu"}, Capabilities: wire.Capabilities{Runners: []string{"process", "docker"}}, LastSeenEpochS: 997},
		{ID: "worker-two", State: "setting_up", Versions: map[string]any{"daemon": nil}, PendingCommands: 2},
	}, now)
	want := "ID          LABEL  STATE       VERSION  QUEUES   RUNNERS         RUNNING  PENDING  LAST SEEN\n" +
		"w1          a      active      1.4.0    gpu      process,docker  0        0        3s ago\n" +
		"worker-two  -      setting_up  -        default  -               0        2        never\n"
	if b.String() != want {
		t.Fatalf("workers table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestTablesEscapeServerStrings(t *testing.T) {
	now := time.Unix(1000, 0)
	var b bytes.Buffer
	WriteWorkers(&b, []operator.Worker{{
		ID: "w1\x1b[A", Label: hostile, State: "active\x7f", Versions: map[string]any{"daemon": "1\x1b[2J"}, Queues: []string{"q\u009b", "r\x9b"},
		Capabilities: wire.Capabilities{Runners: []string{"process\r"}}, LastSeenEpochS: 997,
	}}, now)
	WriteInvocations(&b, []operator.Invocation{{
		ID: "i1", Queue: "default", State: "failed",
		Error: &wire.ErrorInfo{TypeName: "Boom\x1b[31m", Message: "red\x1b[0m"}, CreatedEpochS: 997,
	}}, now)
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\x7f\r\u009b") {
		t.Fatalf("a control character reached the table:\n%q", out)
	}
	for _, want := range []string{`w1\x1b[A`, `\x1b]0;pwned\a\x1b[2J`, `active\x7f`, `1\x1b[2J`, `q\u009b,r\x9b`, `process\r`, `Boom\x1b[31m: red\x1b[0m`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %s:\n%s", want, out)
		}
	}
	// One line per row: nothing the server sent broke the table.
	if lines := strings.Count(out, "\n"); lines != 4 {
		t.Errorf("%d lines, want 4:\n%s", lines, out)
	}
}

func TestWriteJSONEscapesC1AndDEL(t *testing.T) {
	ws := []operator.Worker{{ID: "w1", Label: hostile + "\u009b2J\x7f é"}}
	var b bytes.Buffer
	if err := WriteJSON(&b, ws); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07\x7f\u009b") {
		t.Fatalf("a control character reached the JSON:\n%q", b.String())
	}
	if !strings.Contains(b.String(), `\u009b2J\u007f é`) {
		t.Errorf("JSON lacks the escapes:\n%s", b.String())
	}
	var back []operator.Worker
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back[0].Label != ws[0].Label {
		t.Fatalf("JSON does not decode to the same label: %+v, %v", back, err)
	}
}

// TestErrorTextSaysTheTypeOnce: a runner's message that starts with its
// type is not prefixed again, in the table as in `ctl run`'s line.
func TestErrorTextSaysTheTypeOnce(t *testing.T) {
	for _, c := range []struct {
		e    wire.ErrorInfo
		want string
	}{
		{wire.ErrorInfo{TypeName: "ValueError", Message: "ValueError: bad"}, "ValueError: bad"},
		{wire.ErrorInfo{TypeName: "WorkerLost", Message: "worker w1 stopped polling"}, "WorkerLost: worker w1 stopped polling"},
	} {
		if got := ErrorText(&c.e); got != c.want {
			t.Errorf("ErrorText(%+v) = %q, want %q", c.e, got, c.want)
		}
	}
	var b strings.Builder
	inv := operator.Invocation{ID: "i1", State: "failed", Error: &wire.ErrorInfo{TypeName: "ValueError", Message: "ValueError: bad"}}
	if err := WriteInvocations(&b, []operator.Invocation{inv}, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "ValueError") != 1 {
		t.Errorf("the table names the type more than once:\n%s", b.String())
	}
}
