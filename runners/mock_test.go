//go:build nymph_mock

package runners

import (
	"context"
	"testing"

	"github.com/nymphd/nymph/wirecore/wire"
)

func TestMockRunner(t *testing.T) {
	r := NewRegistry(Config{Root: t.TempDir()}, BuildTagged()...)
	o := r.ExecuteAs(context.Background(), KindMock, wire.Run{InvocationID: "m1", ArgsBlob: []byte("echo")}, "m1")
	if o.State != wire.StateSucceeded || string(o.ResultBlob) != "echo" {
		t.Fatalf("%+v", o)
	}
	o = r.ExecuteAs(context.Background(), KindMock, wire.Run{InvocationID: "m2", Function: wire.Function{Qualname: "fail"}}, "m2")
	if o.State != wire.StateFailed || o.Error.Message != "MockError: asked to fail" {
		t.Fatalf("%+v", o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o = r.ExecuteAs(ctx, KindMock, wire.Run{InvocationID: "m3", Function: wire.Function{Qualname: "hang"}}, "m3")
	if o.State != wire.StateKilled || o.Error.TypeName != wire.ErrTypeCancelled {
		t.Fatalf("%+v", o)
	}
}
