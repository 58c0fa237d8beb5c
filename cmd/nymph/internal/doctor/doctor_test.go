package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunKeepsOrderWhateverFinishesFirst(t *testing.T) {
	var checks []Check
	for i, d := range []time.Duration{60, 0, 30, 10} {
		checks = append(checks, Check{Name: string(rune('a' + i)), Run: func(ctx context.Context) Result {
			time.Sleep(d * time.Millisecond)
			return OK("slept %d", d)
		}})
	}
	res := Run(context.Background(), checks, Options{})
	var names []string
	for _, r := range res {
		names = append(names, r.Name+":"+r.Reason)
	}
	if got := strings.Join(names, " "); got != "a:slept 60 b:slept 0 c:slept 30 d:slept 10" {
		t.Errorf("results %s", got)
	}
}

func TestAPanicOrAHangFailsThatCheckOnly(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	checks := []Check{
		{Name: "panics", Run: func(context.Context) Result { panic("boom") }},
		{Name: "hangs", Timeout: 50 * time.Millisecond, Run: func(context.Context) Result {
			<-release // ignores its context
			return OK("never")
		}},
		{Name: "honours its context", Timeout: 50 * time.Millisecond, Run: func(ctx context.Context) Result {
			<-ctx.Done()
			return Fail("wait less", "gave up: %v", ctx.Err())
		}},
		{Name: "fine", Run: func(context.Context) Result { return OK("fine") }},
		{Name: "warns", Run: func(context.Context) Result { return Warn("do this", "a warning") }},
	}
	start := time.Now()
	res := Run(context.Background(), checks, Options{Grace: 50 * time.Millisecond})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Run took %s with a hung check", took)
	}
	want := []struct {
		status Status
		reason string
	}{
		{StatusFail, "the check panicked: boom"},
		{StatusFail, "no result within 50ms"},
		{StatusFail, "gave up: context deadline exceeded"},
		{StatusOK, "fine"},
		{StatusWarn, "a warning"},
	}
	for i, w := range want {
		if res[i].Status != w.status || res[i].Reason != w.reason || res[i].Name != checks[i].Name {
			t.Errorf("%s: %+v; want %s %q", checks[i].Name, res[i], w.status, w.reason)
		}
	}
	if ExitCode(res) != 1 {
		t.Errorf("exit code %d with failures", ExitCode(res))
	}
	if ExitCode(res[3:]) != 0 {
		t.Errorf("exit code %d with ok and warn only", ExitCode(res[3:]))
	}
}

func TestRunBoundsParallelChecks(t *testing.T) {
	var running, most atomic.Int32
	var checks []Check
	for range 12 {
		checks = append(checks, Check{Name: "c", Run: func(context.Context) Result {
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
			running.Add(-1)
			return OK("")
		}})
	}
	Run(context.Background(), checks, Options{Parallel: 3})
	if m := most.Load(); m > 3 || m < 2 {
		t.Errorf("%d checks ran at once; want at most 3 (and more than one)", m)
	}
}

func TestAHungCheckGivesItsSlotBack(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	checks := []Check{
		{Name: "hangs", Timeout: 20 * time.Millisecond, Run: func(context.Context) Result { <-release; return OK("") }},
		{Name: "after", Run: func(context.Context) Result { return OK("ran") }},
	}
	res := Run(context.Background(), checks, Options{Parallel: 1, Grace: 20 * time.Millisecond})
	if res[1].Status != StatusOK || res[1].Reason != "ran" {
		t.Errorf("the check behind a hung one: %+v", res[1])
	}
}

func TestWriteText(t *testing.T) {
	var buf bytes.Buffer
	err := WriteText(&buf, []Result{
		{Name: "config", Status: StatusOK, Reason: "read /etc/x.toml", Fix: "ignored when ok"},
		{Name: "token-file", Status: StatusFail, Reason: "mode 0644", Fix: "chmod 600 /t"},
		{Name: "runsc", Status: StatusSkip, Reason: "not on PATH"},
		{Name: "server", Status: StatusFail, Reason: "refused: \x1b[31mred"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "ok    config      read /etc/x.toml\n" +
		"fail  token-file  mode 0644; fix: chmod 600 /t\n" +
		"skip  runsc       not on PATH\n" +
		"fail  server      refused: \\x1b[31mred\n" +
		"1 ok, 0 warn, 2 fail, 1 skip\n"
	if buf.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	in := []Result{{Name: "a", Status: StatusWarn, Reason: "r", Fix: "f"}, {Name: "b", Status: StatusOK, Reason: "fine"}}
	if err := WriteJSON(&buf, in); err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if len(out) != 2 || out[0]["name"] != "a" || out[0]["status"] != "warn" || out[0]["reason"] != "r" || out[0]["fix"] != "f" ||
		out[1]["status"] != "ok" {
		t.Errorf("json: %s", buf.String())
	}
	if _, ok := out[1]["fix"]; !ok {
		t.Errorf("every element carries fix, empty when ok: %s", buf.String())
	}
	buf.Reset()
	if err := WriteJSON(&buf, nil); err != nil || strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("no results: %q, %v", buf.String(), err)
	}
}
