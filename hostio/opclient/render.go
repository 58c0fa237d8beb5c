package opclient

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nymphd/nymph/wirecore/operator"
)

// WriteJSON writes v as indented JSON, for --json.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteWorkers writes an aligned table of workers; now dates LAST SEEN.
func WriteWorkers(w io.Writer, ws []operator.Worker, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tSTATE\tQUEUES\tRUNNERS\tRUNNING\tPENDING\tLAST SEEN")
	for _, wk := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n",
			wk.ID, dash(wk.Label), wk.State, list(wk.Queues, "default"),
			list(wk.Capabilities.Runners, "-"), wk.Running, wk.PendingCommands,
			ago(now, wk.LastSeenEpochS))
	}
	return tw.Flush()
}

// WriteInvocations writes an aligned table of invocations.
func WriteInvocations(w io.Writer, invs []operator.Invocation, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUEUE\tRUNNER\tWORKER\tSTATE\tCREATED\tERROR")
	for _, inv := range invs {
		errText := "-"
		if inv.Error != nil {
			errText = inv.Error.TypeName + ": " + oneLine(inv.Error.Message)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
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
	t := time.Unix(0, int64(epochS*float64(time.Second)))
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
