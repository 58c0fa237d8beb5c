package planeserver

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// A releases directory: its listed files served with no credential, the
// rest of it not at all, and an update without a url derived from the
// worker's platform; a platform without a binary is unreachable (409).
func TestReleases(t *testing.T) {
	dir := t.TempDir()
	bin := []byte("the linux amd64 binary")
	sum := sha256.Sum256(bin)
	hexSum := hex.EncodeToString(sum[:])
	os.WriteFile(filepath.Join(dir, "nymph-linux-amd64-1.2.0"), bin, 0o644)
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("not listed"), 0o644)
	os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(hexSum+"  nymph-linux-amd64-1.2.0\n"), 0o644)
	ts := newTestServer(t, nil, func(c *Config) { c.Releases = dir })

	get := func(name string) (int, string) {
		req, _ := http.NewRequest("GET", ts.http.URL+strings.Replace(operator.PathRelease, "{name}", name, 1), nil)
		st, b := ts.do(req)
		return st, string(b)
	}
	if st, b := get("nymph-linux-amd64-1.2.0"); st != 200 || b != string(bin) {
		t.Errorf("release: %d %q", st, b)
	}
	if st, _ := get("SHA256SUMS"); st != 200 {
		t.Errorf("SHA256SUMS: %d", st)
	}
	for _, name := range []string{"secret.txt", "..%2Fetc%2Fpasswd", "nymph-linux-amd64-9"} {
		if st, _ := get(name); st != 404 {
			t.Errorf("%s: %d, want 404", name, st)
		}
	}

	kernel, arch, risc := "Linux 6.1.0", "x86_64", "riscv64"
	h := helloBody("m1")
	h.Versions.Kernel, h.Versions.Arch = &kernel, &arch
	if st, _ := ts.postMsg(wire.PathHello, h); st != 200 {
		t.Fatalf("hello: %d", st)
	}
	h2 := helloBody("m2")
	h2.Versions.Kernel, h2.Versions.Arch = &kernel, &risc
	if st, _ := ts.postMsg(wire.PathHello, h2); st != 200 {
		t.Fatalf("hello: %d", st)
	}
	var ws []operator.Worker
	ts.admin("GET", operator.PathWorkers, nil, &ws)
	ids := map[string]string{}
	for _, w := range ws {
		ids[w.MachineID] = w.ID
	}
	var acc operator.CommandAccepted
	if st := ts.admin("POST", idPath(operator.PathUpdate, ids["m1"]), operator.UpdateRequest{}, &acc); st != 200 || acc.Version != "1.2.0" {
		t.Fatalf("derived update: %d %+v", st, acc)
	}
	resp := ts.poll(ids["m1"], 0)
	if len(resp.Commands) != 1 || resp.Commands[0].Kind != wire.KindOTAUpdate {
		t.Fatalf("poll brought %+v, want one ota_update", resp.Commands)
	}
	var up wire.OTAUpdate
	if _, err := up.UnmarshalMsg(resp.Commands[0].Body); err != nil {
		t.Fatal(err)
	}
	want := wire.OTAUpdate{Version: "1.2.0", URL: ts.srv.cfg.PublicURL + "/v1/releases/nymph-linux-amd64-1.2.0", SHA256: hexSum}
	if up != want {
		t.Errorf("ota_update %+v, want %+v", up, want)
	}
	if st := ts.admin("POST", idPath(operator.PathUpdate, ids["m2"]), operator.UpdateRequest{}, nil); st != http.StatusConflict {
		t.Errorf("update of a riscv64 worker: %d, want 409", st)
	}
}
