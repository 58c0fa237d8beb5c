package main

import (
	"context"
	"encoding/pem"
	"time"

	"github.com/nymphd/nymph/cmd/nymph/internal/termtext"
	"github.com/nymphd/nymph/hostio/tlsca"
)

// ctlCA shows the CA this ctl verified the server by — the one a join
// token pins and a client's --ca-file names — or, with --pem, writes its
// certificate, so `nymph ctl ca --pem > ca.crt` hands it to another host.
func ctlCA(ctx context.Context, c *ctlRun, args []string) int {
	fs := c.flags("ca")
	asPEM := fs.Bool("pem", false, "print the CA certificate in PEM instead")
	if _, _, st := c.prepare("ca", fs, args, 0, false); st >= 0 {
		return st
	}
	ca, err := c.client.ServerCA(ctx)
	if err != nil {
		return c.fail(err)
	}
	if *asPEM {
		c.env.stdout.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))
		return 0
	}
	trusted := c.conn.caFile
	if trusted == "" {
		trusted = "(the system's roots)"
	}
	for _, row := range [][2]string{
		{"server", c.client.Server()},
		{"ca_fingerprint", tlsca.Fingerprint(ca)},
		{"ca_subject", ca.Subject.String()},
		{"ca_not_after", ca.NotAfter.UTC().Format(time.RFC3339)},
		{"ca_file", trusted},
	} {
		termtext.Fprintf(c.env.stdout, "%-15s %s\n", row[0]+":", row[1])
	}
	return 0
}
