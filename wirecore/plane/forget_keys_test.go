package plane

import (
	"maps"
	"math/rand/v2"
	"testing"
	"time"
)

// A forgotten worker's revoked keys leave the live plane as they would
// leave a plane restored from the store: both planes know the same
// revocations afterwards, the other worker's still there.
func TestForgetDropsRevocationsAsRestoreWould(t *testing.T) {
	snap := Snapshot{Workers: []WorkerRecord{
		{ID: "w-gone", MachineID: "m1", State: WorkerLost, KeyRevoked: true, RevokedKeyIDs: []string{"k-old1", "k-old2"}, CreatedAt: t0},
		{ID: "w-kept", MachineID: "m2", State: WorkerLost, KeyRevoked: true, RevokedKeyIDs: []string{"k-other"}, CreatedAt: t0.Add(time.Second)},
	}}
	cfg := Config{Entropy: rand.NewChaCha8([32]byte{4})}
	p, err := Restore(cfg, snap, t0)
	if err != nil {
		t.Fatal(err)
	}
	p.Step(t0, ForgetWorker{Req: 1, WorkerID: "w-gone"})
	again, err := Restore(cfg, p.Snapshot(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(p.revoked, again.revoked) || len(p.revoked) != 1 || p.revoked["k-other"] != "w-kept" {
		t.Fatalf("revocations live %v, restored %v; want only k-other of w-kept in both", p.revoked, again.revoked)
	}
}
