package strictwire

import (
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func encode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The checker itself: each way a body can fail a strictly typed reader is
// caught, and a conforming body passes.
func TestDecodeIsStrict(t *testing.T) {
	exec := func(edit func(m map[string]any)) map[string]any {
		m := map[string]any{"exec_id": "x", "command": "true", "env": map[string]any{}, "stdin": "",
			"log": map[string]any{"stdout_url": "https://p/v1/daemon/exec/x/chunk", "flush_ms": 200, "flush_bytes": 65536}}
		if edit != nil {
			edit(m)
		}
		return m
	}
	var ok Exec
	if err := Decode(encode(t, exec(nil)), &ok); err != nil || ok.Log == nil || ok.Log.FlushMS != 200 {
		t.Fatalf("conforming exec: %+v, %v", ok, err)
	}
	for name, c := range map[string]struct {
		body map[string]any
		want string
	}{
		"env missing":       {exec(func(m map[string]any) { delete(m, "env") }), "required key env is missing"},
		"stdin missing":     {exec(func(m map[string]any) { delete(m, "stdin") }), "required key stdin is missing"},
		"stdin nil":         {exec(func(m map[string]any) { m["stdin"] = nil }), "stdin is nil"},
		"env nil":           {exec(func(m map[string]any) { m["env"] = nil }), "env is nil"},
		"env value number":  {exec(func(m map[string]any) { m["env"] = map[string]any{"A": 1} }), "env.A is int8"},
		"float flush_ms":    {exec(func(m map[string]any) { m["log"].(map[string]any)["flush_ms"] = 200.0 }), "log.flush_ms is float64"},
		"negative flush":    {exec(func(m map[string]any) { m["log"].(map[string]any)["flush_bytes"] = -1 }), "want an unsigned integer"},
		"float timeout_s":   {exec(func(m map[string]any) { m["timeout_s"] = 60.0 }), "timeout_s is float64"},
		"stdout_url absent": {exec(func(m map[string]any) { delete(m["log"].(map[string]any), "stdout_url") }), "log.stdout_url is missing"},
		"payload as str":    {exec(func(m map[string]any) { m["payload_inline"] = "abc" }), "want bin"},
	} {
		var got Exec
		err := Decode(encode(t, c.body), &got)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	var h HelloResponse
	hello := map[string]any{"worker_id": nil, "session_token": nil, "session_ttl_s": 86400.0, "config": map[string]any{},
		"cursor": nil, "reject": nil, "key_id": nil, "key_rotation_max_age_s": 0, "server_time_epoch_s": nil}
	if err := Decode(encode(t, hello), &h); err == nil || !strings.Contains(err.Error(), "session_ttl_s is float64") {
		t.Errorf("session_ttl_s 86400.0: %v", err)
	}
	hello["session_ttl_s"] = 86400
	if err := Decode(encode(t, hello), &h); err != nil || h.SessionTTLS != 86400 {
		t.Errorf("session_ttl_s 86400: %+v %v", h, err)
	}
	delete(hello, "cursor")
	if err := Decode(encode(t, hello), &h); err == nil || !strings.Contains(err.Error(), "cursor is missing") {
		t.Errorf("cursor absent: %v", err)
	}
	if err := Decode(append(encode(t, map[string]any{"error": "x"}), 0xc0), &ErrorBody{}); err == nil {
		t.Error("trailing bytes accepted")
	}
}
