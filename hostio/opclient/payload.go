package opclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/tlsca"
	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/wire"
)

// PayloadKey is the key an uploaded payload is stored under: its digest,
// so the same bytes are uploaded once however often they are sent.
func PayloadKey(sha string) string { return "sha256-" + sha }

// UploadPayload puts data in the control plane's payload store, in
// namespace ns, and returns the payload_ref that names it, sha256
// included, so the daemon verifies what it downloads. Bytes already
// stored under their digest are not sent again: sent says whether they
// were.
func (c *Client) UploadPayload(ctx context.Context, ns string, data []byte) (ref wire.PayloadRef, sent bool, err error) {
	if len(data) > wire.PayloadMax {
		return wire.PayloadRef{}, false, fmt.Errorf("opclient: payload of %d bytes: over the %d-byte limit", len(data), wire.PayloadMax)
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	ref = wire.PayloadRef{Bucket: ns, Key: PayloadKey(sha), Size: wire.Int(len(data)),
		ContentType: wire.ContentTypeOctets, SHA256: &sha}
	size := wire.Int(len(data))
	p := strings.Replace(operator.PathPresign, "{ns}", ns, 1)
	signed, err := post[wire.PresignResponse](ctx, c, p, wire.PresignRequest{Op: "put", Key: ref.Key, Size: &size, Kind: "payload"})
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return ref, false, nil // stored already: the key is the digest
	}
	if err != nil {
		return wire.PayloadRef{}, false, err
	}
	if sent, err = c.put(ctx, signed, data); err != nil {
		return wire.PayloadRef{}, false, err
	}
	return ref, sent, nil
}

// put sends data to a presigned put URL, without the admin bearer; sent
// is false when another upload of the same digest got there first.
func (c *Client) put(ctx context.Context, signed wire.PresignResponse, data []byte) (sent bool, err error) {
	target, err := httpclient.CheckURL("opclient: presigned", signed.URL)
	if err != nil {
		return false, err
	}
	method := signed.Method
	if method == "" {
		method = http.MethodPut
	}
	req, err := http.NewRequestWithContext(ctx, method, target.String(), bytes.NewReader(data))
	if err != nil {
		return false, fmt.Errorf("opclient: %s %s: %w", method, target.Redacted(), err)
	}
	for k, v := range signed.Headers {
		req.Header.Set(k, v)
	}
	hc := c.http
	if !frame.SameOrigin(target, c.base) {
		// Another origin (an object store): the system's roots, and
		// still no redirect.
		hc = &http.Client{CheckRedirect: httpclient.RefuseRedirect}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("opclient: %s %s: %w", method, target.Redacted(), tlsca.Explain(err))
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	switch {
	case resp.StatusCode == http.StatusConflict:
		return false, nil // another upload of the same digest won
	case resp.StatusCode/100 != 2:
		return false, &APIError{Op: method + " " + target.Path, Status: resp.StatusCode, Message: strings.TrimSpace(string(msg))}
	}
	return true, nil
}
