//go:build nymph_mock

package builtin

import "testing"

func TestMockInTaggedBuild(t *testing.T) {
	rs, err := Runners([]string{"mock"}, Options{})
	if err != nil || len(rs) != 1 || rs[0].Kind() != "mock" {
		t.Fatalf("%v %v", rs, err)
	}
}
