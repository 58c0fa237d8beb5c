package daemon

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
)

// An ota_update wire.CheckOTA refuses is skipped by the machine with the
// rule's reason, and no download is asked for: the updater would refuse
// it, so asking would only turn a broken command into a failed download.
// The cases the transcripts cannot write (they always send a url) are
// here; a malformed sha256 is in command_kinds.txt.
func TestOTARefusedIsSkipped(t *testing.T) {
	sha := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name   string
		update wire.OTAUpdate
		reason string
	}{
		{"no url", wire.OTAUpdate{Version: "0.4.0", SHA256: sha}, "url is empty"},
		{"no version", wire.OTAUpdate{URL: "https://r.example/nymph", SHA256: sha}, "version is empty"},
	} {
		cfg := DefaultConfig()
		cfg.DaemonVersion = "0.3.0"
		m := New(cfg, rand.New(rand.NewPCG(1, 2)))
		body, err := tc.update.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		id := "w1"
		now := epoch
		var effects []Effect
		for _, ev := range []Event{
			Boot{},
			HelloResult{Status: 200, Response: &wire.HelloResponse{WorkerID: &id}},
			PollResult{Seq: 1, Status: 200, Response: &wire.PollResponse{
				Commands: []wire.Command{{ID: "o1", Kind: wire.KindOTAUpdate, Body: body}}}},
		} {
			now = now.Add(time.Second)
			effects = m.Step(now, ev)
		}
		skipped := false
		for _, e := range effects {
			switch e := e.(type) {
			case StartOTA:
				t.Errorf("%s: StartOTA %+v for an update the rule refuses", tc.name, e.Update)
			case Log:
				if e.Msg != "command skipped" {
					continue
				}
				attrs := map[string]string{}
				for _, a := range e.Attrs {
					attrs[a.Key] = a.Value.String()
				}
				if attrs["command_id"] == "o1" && attrs["kind"] == wire.KindOTAUpdate && attrs["reason"] == tc.reason {
					skipped = true
				}
			}
		}
		if !skipped {
			t.Errorf("%s: no \"command skipped\" log for o1 with reason %q in %#v", tc.name, tc.reason, effects)
		}
	}
}
