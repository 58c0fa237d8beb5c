package wire

import (
	"slices"
	"testing"
)

// An ExtSet holds exactly the known names of its list, and agrees with
// AgreedExtensions on every subset of the known ones.
func TestExtSetMatchesAgreedExtensions(t *testing.T) {
	known := KnownExtensions[:]
	for mask := range 1 << len(known) {
		var list []string
		for i, e := range known {
			if mask&(1<<i) != 0 {
				list = append(list, e)
			}
		}
		list = append(list, "nymph_future", "")
		set := ExtSetOf(list)
		agreed := AgreedExtensions(list)
		for _, e := range known {
			if set.Has(e) != slices.Contains(agreed, e) {
				t.Errorf("list %q: Has(%q) = %v, AgreedExtensions %q", list, e, set.Has(e), agreed)
			}
		}
		if set.Has("nymph_future") || set.Has("") {
			t.Errorf("list %q: an unknown name is in the set", list)
		}
	}
	if ExtSetOf(nil) != 0 {
		t.Errorf("ExtSetOf(nil) = %b, want empty", ExtSetOf(nil))
	}
}
