package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
	"github.com/nymphd/nymph/hostio/opclient"
	"github.com/nymphd/nymph/wirecore/operator"
)

// The verbs of per-host trust: minting join tokens, listing them, and a
// worker's key rotated or revoked.

// tagFlags collects repeated --tag k=v.
type tagFlags []string

func (t *tagFlags) String() string { return strings.Join(*t, ",") }

func (t *tagFlags) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("want k=v, got %q", v)
	}
	*t = append(*t, v)
	return nil
}

// ctlToken mints a join token and prints exactly the join line on
// stdout, so that it can be piped or copied whole; the expiry goes to
// stderr.
func ctlToken(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("token")
	ttl := fs.Duration("ttl", 15*time.Minute, "how long the token redeems")
	queue := fs.String("queue", "", "a queue the joined worker serves, whatever its own config says")
	var tags tagFlags
	fs.Var(&tags, "tag", "a k=v tag the joined worker carries, whatever its own config says (repeatable)")
	if _, _, st := c.prepare("token", fs, args, 0, false); st >= 0 {
		return st
	}
	if *ttl <= 0 {
		return c.usageErr("token", "--ttl %s: must be positive", *ttl)
	}
	created, err := c.client.CreateToken(ctx, operator.TokenRequest{TTLS: ttl.Seconds(), Queue: *queue, Tags: tags})
	if err != nil {
		return c.fail(err)
	}
	termtext.Fprintf(c.env.stdout, "%s\n", created.JoinCommand)
	termtext.Fprintf(c.env.stderr, "token %s expires at %s (in %s); it enrols one host\n",
		created.ID, created.ExpiresAt.UTC().Format(time.RFC3339), time.Until(created.ExpiresAt).Round(time.Second))
	return 0
}

// ctlTokens lists the minted tokens, never their secrets.
func ctlTokens(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("tokens")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, _, st := c.prepare("tokens", fs, args, 0, false); st >= 0 {
		return st
	}
	list, err := c.client.ListTokens(ctx)
	return printList(c, list, err, *asJSON, writeTokens)
}

// writeTokens prints tokens as a table, oldest first.
func writeTokens(w io.Writer, list []operator.Token, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tQUEUE\tTAGS\tEXPIRES\tWORKER")
	for _, t := range list {
		expires := t.ExpiresAt.UTC().Format(time.RFC3339)
		if t.State == operator.TokenUnused {
			expires += " (in " + t.ExpiresAt.Sub(now).Round(time.Second).String() + ")"
		}
		termtext.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.State, dash(t.Queue), dash(strings.Join(t.Tags, ",")), expires, dash(t.WorkerID))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ctlRotateKey queues a rotate_key: the worker's daemon makes a new key
// and posts it, signed by the old one.
func ctlRotateKey(ctx context.Context, c *ctlRun, args []string) int {
	worker, st := c.onlyWorker(ctx, "rotate-key", args)
	if st >= 0 {
		return st
	}
	acc, err := c.client.RotateKey(ctx, worker)
	return c.accepted(acc, err, "rotate_key")
}

// ctlRevoke revokes a worker's key at once: its daemon is refused with
// key_revoked and stops; its host joins again only with a new token.
func ctlRevoke(ctx context.Context, c *ctlRun, args []string) int {
	worker, st := c.onlyWorker(ctx, "revoke", args)
	if st >= 0 {
		return st
	}
	rev, err := c.client.RevokeKey(ctx, worker)
	if err != nil {
		return c.fail(err)
	}
	termtext.Fprintf(c.env.stdout, "revoked %s of worker %s; its host joins again with a new token (nymph ctl token)\n",
		strings.Join(rev.KeyIDs, " and "), rev.WorkerID)
	return 0
}

// ctlForget forgets lost workers, named or (--all-lost) every one: their
// records and undelivered commands go, so they count against serve's
// --max-workers no more.
func ctlForget(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("forget")
	allLost := fs.Bool("all-lost", false, "forget every worker that is lost")
	pos, rest, st := c.parse(fs, args, -1)
	if st >= 0 {
		return st
	}
	refs := append(pos, rest...)
	switch {
	case *allLost && len(refs) > 0:
		return c.usageErr("forget", "name workers or give --all-lost, not both")
	case !*allLost && len(refs) == 0:
		return c.usageErr("forget", "missing argument: a worker, or --all-lost")
	}
	if st := c.connect(); st >= 0 {
		return st
	}
	ws, err := c.client.Workers(ctx)
	if err != nil {
		return c.fail(err)
	}
	var ids []string
	if *allLost {
		for _, w := range ws {
			if w.State == "lost" {
				ids = append(ids, w.ID)
			}
		}
		if len(ids) == 0 {
			fmt.Fprintln(c.env.stdout, "no lost worker")
			return 0
		}
	}
	for _, ref := range refs {
		w, ok := forgetMatch(ws, ref)
		if !ok {
			termtext.Fprintf(c.env.stderr, "nymph ctl: no single worker is %q\n", ref)
			return 1
		}
		ids = append(ids, w.ID)
	}
	status := 0
	for _, id := range ids {
		f, err := c.client.ForgetWorker(ctx, id)
		if err != nil {
			status = c.fail(err) // the next ones are still tried
			continue
		}
		termtext.Fprintf(c.env.stdout, "forgot worker %s (%d undelivered commands dropped, %d execs ended)\n", f.WorkerID, f.CommandsDropped, f.ExecsEnded)
	}
	return status
}

// forgetMatch is the worker ref names for forget, a lost one preferred:
// what forget is for is a host that came back under a new id with the
// same label, and there MatchWorker would pick the live worker beside the
// lost one. Naming one active worker still matches it, so that forget
// gets the plane's answer saying it is not lost rather than "no single
// worker".
func forgetMatch(ws []operator.Worker, ref string) (operator.Worker, bool) {
	return opclient.MatchWorkerPreferring(ws, ref, func(w operator.Worker) bool { return w.State == "lost" })
}
