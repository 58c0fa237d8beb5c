package wire_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nymphd/nymph/gen/goldens/vectors"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

func vector(t testing.TB, name string) vectors.Vector {
	t.Helper()
	for _, v := range vectors.All() {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no vector %q", name)
	return vectors.Vector{}
}

// TestDispatchEachKind: the golden poll response holds one command of each
// kind; each dispatches to its typed directive with the body of its vector.
func TestDispatchEachKind(t *testing.T) {
	var resp wire.PollResponse
	if _, err := resp.UnmarshalMsg(readGolden(t, "poll_response.msgpack")); err != nil {
		t.Fatal(err)
	}
	want := []wire.Directive{
		wire.HibernateCommand{ID: "cmd-1", Body: *vector(t, "command_hibernate").Value.(*wire.Hibernate)},
		wire.SetupCommand{ID: "cmd-2", Body: *vector(t, "command_setup").Value.(*wire.Setup)},
		wire.ExecCommand{ID: "cmd-3", Body: *vector(t, "command_exec").Value.(*wire.Exec)},
		wire.OTAUpdateCommand{ID: "cmd-4", Body: *vector(t, "command_ota_update").Value.(*wire.OTAUpdate)},
		wire.ResetBackoffCommand{ID: "cmd-5"},
		wire.RotateKeyCommand{ID: "cmd-6"},
		wire.RunCommand{ID: "cmd-7", Body: *vector(t, "command_run").Value.(*wire.Run)},
	}
	if len(resp.Commands) != len(want) {
		t.Fatalf("%d commands, want %d", len(resp.Commands), len(want))
	}
	for i, c := range resp.Commands {
		got := wire.Dispatch(c)
		if diff := cmp.Diff(want[i], got, valueOpts); diff != "" {
			t.Errorf("command %d (%s) (-want +got):\n%s", i, c.Kind, diff)
		}
		if got.CommandID() != c.ID || got.CommandKind() != c.Kind {
			t.Errorf("command %d: id/kind %q/%q, want %q/%q", i, got.CommandID(), got.CommandKind(), c.ID, c.Kind)
		}
	}
}

func mapBody(kv ...any) msgp.Raw {
	b := msgp.AppendMapHeader(nil, uint32(len(kv)/2))
	for i := 0; i < len(kv); i += 2 {
		b = msgp.AppendString(b, kv[i].(string))
		var err error
		if b, err = msgp.AppendIntf(b, kv[i+1]); err != nil {
			panic(err)
		}
	}
	return b
}

func TestDispatchUnknownKind(t *testing.T) {
	for _, kind := range []string{"", "Cancel", "Exec", "EXEC", "reset-backoff", "hibernate "} {
		got := wire.Dispatch(wire.Command{ID: "c1", Kind: kind, Body: mapBody("exec_id", "x", "command", "true")})
		u, ok := got.(wire.Unknown)
		if !ok {
			t.Errorf("kind %q: %T, want Unknown", kind, got)
			continue
		}
		if u.ID != "c1" || u.Kind != kind || !strings.Contains(u.Reason, "unknown command kind") {
			t.Errorf("kind %q: %+v", kind, u)
		}
	}
}

// TestDispatchBadBody: a body that does not fit its kind is Unknown with a
// reason, never a panic or an error.
func TestDispatchBadBody(t *testing.T) {
	cases := []struct {
		kind string
		body msgp.Raw
		why  string
	}{
		{wire.KindHibernate, msgp.AppendString(nil, "tomorrow"), "does not decode"},
		{wire.KindHibernate, mapBody("until_epoch_s", "tomorrow"), "does not decode"},
		{wire.KindHibernate, nil, "does not decode"},
		{wire.KindSetup, mapBody("script", 42), "does not decode"},
		{wire.KindExec, mapBody("command", "true"), "no exec_id"},
		{wire.KindExec, mapBody("exec_id", []string{"x"}), "does not decode"},
		{wire.KindExec, append(mapBody("exec_id", "x"), 0xc0), "trailing bytes"},
		{wire.KindExec, []byte{0x82, 0xa7}, "does not decode"}, // truncated
		{wire.KindOTAUpdate, mapBody("version", 2), "does not decode"},
		{wire.KindRun, mapBody("function", "f"), "does not decode"},
		{wire.KindRun, mapBody("args_blob", []byte{1}), "no invocation_id"},
		{wire.KindRun, mapBody("invocation_id", "i", "args_blob", []any{1, 300}), "does not decode"},
	}
	for _, c := range cases {
		got := wire.Dispatch(wire.Command{ID: "c9", Kind: c.kind, Body: c.body})
		u, ok := got.(wire.Unknown)
		if !ok {
			t.Errorf("%s %x: %T, want Unknown", c.kind, []byte(c.body), got)
			continue
		}
		if u.ID != "c9" || u.Kind != c.kind || !strings.Contains(u.Reason, c.why) {
			t.Errorf("%s %x: %+v, want reason containing %q", c.kind, []byte(c.body), u, c.why)
		}
	}
}

// TestDispatchKindOnly: reset_backoff and rotate_key take any body at all.
func TestDispatchKindOnly(t *testing.T) {
	bodies := []msgp.Raw{nil, {0xc0}, mapBody("x", 1), msgp.AppendString(nil, "s"), {0xc1}, {0xdd, 0xff}}
	for _, body := range bodies {
		if got := wire.Dispatch(wire.Command{ID: "r", Kind: wire.KindResetBackoff, Body: body}); got != (wire.ResetBackoffCommand{ID: "r"}) {
			t.Errorf("reset_backoff with %x: %#v", []byte(body), got)
		}
		if got := wire.Dispatch(wire.Command{ID: "k", Kind: wire.KindRotateKey, Body: body}); got != (wire.RotateKeyCommand{ID: "k"}) {
			t.Errorf("rotate_key with %x: %#v", []byte(body), got)
		}
	}
}

// TestDispatchNullOptionals: a control plane that writes unset optional
// fields as nil (Python None, Rust Option::None) is understood; nil means
// the same as absent.
func TestDispatchNullOptionals(t *testing.T) {
	setup := mapBody("script", "true", "sudo", nil, "refresh_capabilities", nil, "name", nil)
	got := wire.Dispatch(wire.Command{ID: "s", Kind: wire.KindSetup, Body: setup})
	if want := (wire.SetupCommand{ID: "s", Body: wire.Setup{Script: "true"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("setup: %#v", got)
	}

	exec := mapBody("exec_id", "e", "command", "true", "env", nil, "stdin", nil, "workdir", nil,
		"timeout_s", nil, "log", nil, "payload_inline", nil, "payload_ref", nil)
	got = wire.Dispatch(wire.Command{ID: "e", Kind: wire.KindExec, Body: exec})
	if diff := cmp.Diff(wire.ExecCommand{ID: "e", Body: wire.Exec{ExecID: "e", Command: "true"}}, got, valueOpts); diff != "" {
		t.Errorf("exec (-want +got):\n%s", diff)
	}

	runConfig := map[string]any{"runner": nil, "image": nil, "docker": map[string]any{
		"network": nil, "env": nil, "volumes": nil, "args": nil, "registry_auth": nil}, "slurm": nil, "kube": nil}
	run := mapBody("invocation_id", "i", "function", map[string]any{"module": "m", "qualname": "q"},
		"run_config", runConfig, "args_blob", nil, "parent_invocation_id", nil, "root_invocation_id", nil,
		"script", nil, "as_user", nil)
	got = wire.Dispatch(wire.Command{ID: "r", Kind: wire.KindRun, Body: run})
	want := wire.RunCommand{ID: "r", Body: wire.Run{
		InvocationID: "i",
		Function:     wire.Function{Module: "m", Qualname: "q"},
		RunConfig:    wire.RunConfig{Docker: &wire.DockerConfig{}},
	}}
	if diff := cmp.Diff(want, got, valueOpts); diff != "" {
		t.Errorf("run (-want +got):\n%s", diff)
	}

	// A null required field is still a bad body.
	got = wire.Dispatch(wire.Command{ID: "x", Kind: wire.KindExec, Body: mapBody("exec_id", nil, "command", "true")})
	if _, ok := got.(wire.Unknown); !ok {
		t.Errorf("exec with null exec_id: %#v, want Unknown", got)
	}
}

// cancel (extension ExtCancel) names exactly one of a run and an exec.
func TestDispatchCancel(t *testing.T) {
	got := wire.Dispatch(wire.Command{ID: "k1", Kind: wire.KindCancel, Body: mapBody("invocation_id", "r1", "reason", "no longer needed")})
	if c, ok := got.(wire.CancelCommand); !ok || c.Body.InvocationID != "r1" || c.Body.Reason != "no longer needed" {
		t.Fatalf("%#v", got)
	}
	got = wire.Dispatch(wire.Command{ID: "k2", Kind: wire.KindCancel, Body: mapBody("exec_id", "x1", "reason", "")})
	if c, ok := got.(wire.CancelCommand); !ok || c.Body.ExecID != "x1" {
		t.Fatalf("%#v", got)
	}
	for _, body := range []msgp.Raw{mapBody("reason", "r"), mapBody("invocation_id", "r1", "exec_id", "x1", "reason", "r")} {
		if u, ok := wire.Dispatch(wire.Command{ID: "k3", Kind: wire.KindCancel, Body: body}).(wire.Unknown); !ok || !strings.Contains(u.Reason, "neither or both") {
			t.Errorf("%x: %#v", body, u)
		}
	}
}
