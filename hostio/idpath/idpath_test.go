package idpath

import (
	"strings"
	"testing"
)

// Every id the wire allows gets a plain name of its own; a plain id is
// its own name (spec 003: {workdir}/{invocation_id}); anything else is
// refused.
func TestName(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"01HZX", "inv:1", "inv_1", "inv_1-4b5b0a8e", "job@host", "a+b", "k=v", "-lead", ".", "..", ".hidden", "_setup-c:1"} {
		name, err := Name(id)
		if err != nil {
			t.Fatalf("id %q: %v", id, err)
		}
		if !Plain(name) || strings.Contains(name, "/") {
			t.Errorf("id %q: name %q is not plain", id, name)
		}
		if Plain(id) && name != id {
			t.Errorf("plain id %q named %q", id, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("ids %q and %q share the name %q", other, id, name)
		}
		seen[name] = id
	}
	for _, id := range []string{"", "../x", "a/b", "/abs", "a\x00b", "é", strings.Repeat("x", MaxName+1)} {
		if name, err := Name(id); err == nil {
			t.Errorf("id %q named %q, want a refusal", id, name)
		}
	}
}

func FuzzName(f *testing.F) {
	for _, s := range []string{"01HZX", "inv:1", "..", "a/b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, err := Name(id)
		if err != nil {
			return
		}
		if !Plain(name) || len(name) > 255 {
			t.Fatalf("id %q named %q", id, name)
		}
	})
}
