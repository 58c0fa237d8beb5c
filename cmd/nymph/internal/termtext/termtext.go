// Package termtext is how the command line prints what a control plane
// says: every string the server supplies (ids, labels, tags, states, error
// messages) with whatever could drive a terminal escaped (Printable,
// Fprintf), --json output with the controls encoding/json leaves raw
// escaped too (WriteJSON), and the aligned tables of `nymph ctl workers`
// and `nymph ctl invocations`.
//
// It decides the escaping and the tables' columns. It does not decide what
// ctl or dev print or when, and it never touches an exec's own output,
// which ctl hands on byte for byte.
package termtext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Printable returns s with everything that could drive a terminal escaped
// as strconv.Quote escapes it: C0 controls (tab and newline included), DEL,
// C1 controls and other runes that do not print (bidirectional overrides,
// for one), and each byte of invalid UTF-8 as \xNN. Printable text, letters
// of any script and spaces are kept as they are, and no quotes are added.
// Every string the server supplies goes through it before ctl or dev
// prints it.
func Printable(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !printableRune(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case printableRune(r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

func printableRune(r rune, size int) bool {
	if r == utf8.RuneError {
		return size > 1 // U+FFFD itself, spelled out, prints
	}
	return r == ' ' || unicode.IsPrint(r)
}

// Fprintf is fmt.Fprintf for the lines ctl and dev print: the format is
// the caller's own, and every string, []string, error and fmt.Stringer argument (which
// may come from the server) is passed through Printable first.
func Fprintf(w io.Writer, format string, a ...any) (int, error) {
	safe := make([]any, len(a))
	for i, v := range a {
		switch v := v.(type) {
		case string:
			safe[i] = Printable(v)
		case []string:
			xs := make([]string, len(v))
			for j, x := range v {
				xs[j] = Printable(x)
			}
			safe[i] = xs
		case error:
			safe[i] = Printable(v.Error())
		case fmt.Stringer:
			safe[i] = Printable(v.String())
		default:
			safe[i] = v
		}
	}
	return fmt.Fprintf(w, format, safe...)
}

// WriteJSON writes v as indented JSON, for --json. encoding/json already
// escapes C0 controls and replaces invalid UTF-8; DEL and the C1 controls,
// which it writes raw and some terminals obey, are escaped too (\u007f to
// \u009f), which any JSON reader decodes to the same string.
func WriteJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeC1(buf.Bytes()))
	return err
}

// escapeC1 rewrites DEL and U+0080..U+009F in encoded JSON as \u escapes;
// they can only occur inside strings, where the escape means the same.
func escapeC1(b []byte) []byte {
	// U+0080..U+009F are encoded as 0xC2 0x80..0x9F.
	if bytes.IndexByte(b, 0x7f) < 0 && bytes.IndexByte(b, 0xc2) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return out
}

// WriteWorkers writes an aligned table of workers; now dates LAST SEEN.
// Every cell is Printable.
func WriteWorkers(w io.Writer, ws []operator.Worker, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tSTATE\tVERSION\tQUEUES\tRUNNERS\tRUNNING\tPENDING\tLAST SEEN")
	for _, wk := range ws {
		version, _ := wk.Versions["daemon"].(string)
		Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n",
			wk.ID, dash(wk.Label), wk.State, dash(version), list(wk.Queues, "default"),
			list(wk.Capabilities.Runners, "-"), wk.Running, wk.PendingCommands,
			ago(now, wk.LastSeenEpochS))
	}
	return tw.Flush()
}

// ErrorText is a run's error as "<type>: <message>", the type said once:
// a runner's message already starts with it when it surfaces the run's
// error.json.
func ErrorText(e *wire.ErrorInfo) string {
	if strings.HasPrefix(e.Message, e.TypeName+": ") {
		return e.Message
	}
	return e.TypeName + ": " + e.Message
}

// WriteInvocations writes an aligned table of invocations. Every cell is
// Printable.
func WriteInvocations(w io.Writer, invs []operator.Invocation, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUEUE\tRUNNER\tWORKER\tSTATE\tCREATED\tERROR")
	for _, inv := range invs {
		errText := "-"
		if inv.Error != nil {
			errText = oneLine(ErrorText(inv.Error))
		}
		Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			inv.ID, inv.Queue, dash(inv.Runner), dash(inv.WorkerID), inv.State,
			ago(now, inv.CreatedEpochS), errText)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func list(xs []string, empty string) string {
	if len(xs) == 0 {
		return empty
	}
	return strings.Join(xs, ",")
}

// oneLine keeps a table row on one line and its cells short.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 60 {
		s = string(r[:60]) + "…"
	}
	return s
}

// ago renders an epoch time relative to now ("3s ago"); zero is "never".
func ago(now time.Time, epochS float64) string {
	if epochS <= 0 {
		return "never"
	}
	t := wire.EpochTime(epochS)
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.UTC().Format(time.RFC3339)
}
