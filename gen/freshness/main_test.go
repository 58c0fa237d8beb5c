package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestGenerateLines(t *testing.T) {
	dir := t.TempDir()
	src := "package x\n\n" +
		"//go:generate go run ../../gen/codecs -file a.go -o a_gen.go\n" +
		"//go:generate go tool msgp -tests=false -file b.go -o b_gen.go\n" +
		"//go:generate stringer -type T\n" +
		"// go:generate not a directive -o x\n"
	if err := os.WriteFile(filepath.Join(dir, "doc.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	jobs, err := generateLines(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []genJob{
		{args: []string{"go", "run", "../../gen/codecs", "-file", "a.go"}, out: "a_gen.go"},
		{args: []string{"go", "tool", "msgp", "-tests=false", "-file", "b.go"}, out: "b_gen.go"},
	}
	if !slices.EqualFunc(jobs, want, func(a, b genJob) bool { return a.out == b.out && slices.Equal(a.args, b.args) }) {
		t.Errorf("jobs %+v, want %+v", jobs, want)
	}
}

func TestDiffers(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("same"), 0o644)
	os.WriteFile(b, []byte("same"), 0o644)
	if s, err := differs(a, b); err != nil || s != "" {
		t.Errorf("equal files: %q %v", s, err)
	}
	os.WriteFile(b, []byte("other"), 0o644)
	if s, _ := differs(a, b); s == "" {
		t.Error("different files not reported")
	}
	if s, _ := differs(filepath.Join(dir, "missing"), b); s == "" {
		t.Error("missing checked-in file not reported")
	}
}
