//go:build !nymph_mock

package builtin

import "testing"

func TestNoMockInReleaseBuild(t *testing.T) {
	if _, err := Runners([]string{"mock"}, Options{}); err == nil {
		t.Fatal("mock runner offered without the nymph_mock tag")
	}
}
