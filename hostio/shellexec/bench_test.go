package shellexec

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nymphd/nymph/hostio/childpids"
	"github.com/nymphd/nymph/wirecore/wire"
)

// BenchmarkRunTrue and BenchmarkDirectBashTrue run side by side: the cost
// Run adds (pipes, process group, readers, result) over spawning the same
// `bash -c true` with os/exec and nothing else.
func BenchmarkRunTrue(b *testing.B) {
	b.ReportAllocs()
	ex := wire.Exec{ExecID: "bench", Command: "true"}
	opt := Options{}
	for b.Loop() {
		if res := Run(context.Background(), ex, opt); res.ExitCode != 0 {
			b.Fatalf("exit %d", res.ExitCode)
		}
	}
}

// BenchmarkRunTrueWithPIDFile is BenchmarkRunTrue with a PID file
// written and removed around each shell.
func BenchmarkRunTrueWithPIDFile(b *testing.B) {
	b.ReportAllocs()
	pids, err := childpids.Open(filepath.Join(b.TempDir(), "pids"))
	if err != nil {
		b.Fatal(err)
	}
	ex := wire.Exec{ExecID: "bench", Command: "true"}
	opt := Options{PIDs: pids}
	for b.Loop() {
		if res := Run(context.Background(), ex, opt); res.ExitCode != 0 {
			b.Fatalf("exit %d", res.ExitCode)
		}
	}
}

func BenchmarkDirectBashTrue(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
