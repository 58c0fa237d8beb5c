package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nymphd/nymph/cmd/nymph/internal/doctor"
	"github.com/nymphd/nymph/relay"
	"github.com/nymphd/nymph/wirecore/wire"
)

func TestOpenFilesAgainstThePairs(t *testing.T) {
	budget := func(limit, budget int64) func() (int64, int64, bool) {
		return func() (int64, int64, bool) { return limit, budget, true }
	}
	pairs := func(n int) func() (relay.PrefixReport, error) {
		return func() (relay.PrefixReport, error) { return relay.PrefixReport{Pairs: n}, nil }
	}
	for _, tc := range []struct {
		pairs  int
		status doctor.Status
		says   string
	}{
		{100, doctor.StatusOK, "both pipes of every pair are held"},
		{5000, doctor.StatusWarn, "the reply pipes of 256 pairs are opened per reply"},
		{20000, doctor.StatusFail, "the request pipes alone exceed it"},
	} {
		r := openFilesCheck(pairs(tc.pairs), budget(13000, 9744))
		if r.Status != tc.status || !strings.Contains(r.Reason, tc.says) {
			t.Errorf("%d pairs: %s %q; want %s saying %q", tc.pairs, r.Status, r.Reason, tc.status, tc.says)
		}
		if tc.status != doctor.StatusOK && !strings.Contains(r.Fix, "raise the relay's open-file limit to at least ") {
			t.Errorf("%d pairs: fix %q", tc.pairs, r.Fix)
		}
	}
	// 5,000 pairs need 10,000 pipes: a budget of 13,674 − 3,418 − 256.
	r := openFilesCheck(pairs(5000), budget(13000, 9744))
	if want := "at least 13674 "; !strings.Contains(r.Fix, want) {
		t.Errorf("fix %q does not say %q", r.Fix, want)
	}
	r = openFilesCheck(func() (relay.PrefixReport, error) { return relay.PrefixReport{}, errors.New("gone") }, budget(1, 1))
	if r.Status != doctor.StatusSkip {
		t.Errorf("an unreadable prefix: %+v", r)
	}
}

func TestUpstreamFile(t *testing.T) {
	prefix := t.TempDir()
	if r := upstreamFile(prefix, "", "").result; r.Status != doctor.StatusWarn || !strings.Contains(r.Reason, "does not exist") {
		t.Errorf("no file: %+v", r)
	}
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(prefix, wire.RelayUpstreamFile), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"server": "ftp://x"}`)
	if r := upstreamFile(prefix, "", "").result; r.Status != doctor.StatusFail {
		t.Errorf("a file that does not parse: %+v", r)
	}
	write(`{"server": "https://cp.example:8383", "ca_fingerprint": ""}`)
	up := upstreamFile(prefix, "", "")
	if up.result.Status != doctor.StatusOK || up.parsed == nil || up.parsed.Server != "https://cp.example:8383" {
		t.Errorf("a good file: %+v", up)
	}
	if r := upstreamFile(prefix, "https://other:8383", "").result; r.Status != doctor.StatusWarn || !strings.Contains(r.Reason, "another upstream") {
		t.Errorf("another upstream: %+v", r)
	}
}
