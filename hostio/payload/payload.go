// Package payload resolves the payload of an exec or a run (spec 001,
// "Payload store") into a file on this host: a payload_ref is presigned
// on the control plane (POST /v1/namespaces/{bucket}/payloads/presign,
// through whatever transport carries the daemon's requests, so it is
// authenticated as every other request), downloaded from the URL it
// answers with no credential at all, and kept in the blob cache
// (hostio/blobcache) by its SHA-256, so a payload many commands use is
// downloaded once. Behind a relay the download goes through the relay
// too (httpclient.Downloads.Through; docs/protocol.md, "Downloads through
// a relay"), since such a host reaches nothing else.
//
// It decides the presign body (op "get", the ref's key), that the ref's
// bucket is the presign's namespace, the bounds (the ref's size, at most
// wire.PayloadMax, presign and download within wire.PayloadFetchTimeout),
// that a digest or size that disagrees with the ref refuses the payload,
// and how an exec receives its payload (Stage). It does not decide what
// a refusal does to the command (the driver answers exit_code -1 without
// spawning), nor how a run's arguments reach its runner (the runners copy
// the file to args.msgpack).
package payload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/nymphd/nymph/hostio/blobcache"
	"github.com/nymphd/nymph/hostio/httpclient"
	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/wire"
)

// ErrDigestMismatch is a payload whose bytes do not have the ref's sha256.
var ErrDigestMismatch = blobcache.ErrDigestMismatch

// maxPresignReply bounds the presign's answer: a URL and a few headers.
const maxPresignReply = 64 << 10

// Options are a Resolver's collaborators; all are required but Log.
type Options struct {
	// Transport carries the presign, with the daemon's credentials.
	Transport transport.Transport
	// Downloads fetches the presigned URL: without credentials, or
	// through the relay for a daemon behind one (Downloads.Through).
	Downloads *httpclient.Downloads
	Cache     *blobcache.Cache
	Log       *slog.Logger
}

// Resolver turns payload refs into cached files.
type Resolver struct{ opt Options }

// New returns a Resolver.
func New(opt Options) *Resolver {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	return &Resolver{opt: opt}
}

// Fetch returns the path of a read-only file holding ref's bytes (an
// entry of the cache: link or copy it, never write it) and whether it was
// already cached. A ref with a sha256 is looked up first and, on a miss,
// downloaded once however many callers want it at the same time; a ref
// without one is downloaded every time (nothing says its key still holds
// the same bytes), and cached by the digest it turns out to have.
func (r *Resolver) Fetch(ctx context.Context, ref wire.PayloadRef) (path string, hit bool, err error) {
	if err := ref.Check(); err != nil {
		return "", false, err
	}
	ctx, cancel := context.WithTimeout(ctx, wire.PayloadFetchTimeout)
	defer cancel()
	limit := int64(ref.Size)
	if limit <= 0 {
		limit = wire.PayloadMax
	}
	download := func(ctx context.Context) (io.ReadCloser, error) { return r.download(ctx, ref, limit) }
	if ref.SHA256 != nil {
		path, hit, err = r.opt.Cache.Fetch(ctx, strings.ToLower(*ref.SHA256), download, limit)
	} else {
		var body io.ReadCloser
		if body, err = download(ctx); err == nil {
			path, _, _, err = r.opt.Cache.Insert(ctx, body, "", limit)
			body.Close()
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			err = fmt.Errorf("%w (the payload must arrive within %s)", err, wire.PayloadFetchTimeout)
		}
		return "", false, fmt.Errorf("payload %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	if err := checkSize(path, ref); err != nil {
		return "", false, err
	}
	r.opt.Log.Debug("payload resolved", "bucket", ref.Bucket, "key", ref.Key, "path", path, "cache_hit", hit)
	return path, hit, nil
}

// checkSize refuses a payload whose length is not the ref's size (when
// the ref gives one).
func checkSize(path string, ref wire.PayloadRef) error {
	if ref.Size <= 0 {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("payload %s/%s: stat %s: %w", ref.Bucket, ref.Key, path, err)
	}
	if fi.Size() != int64(ref.Size) {
		return fmt.Errorf("payload %s/%s is %d bytes, its payload_ref says %d", ref.Bucket, ref.Key, fi.Size(), ref.Size)
	}
	return nil
}

// download presigns a get of ref and opens the URL it answers with.
func (r *Resolver) download(ctx context.Context, ref wire.PayloadRef, limit int64) (io.ReadCloser, error) {
	signed, err := r.presign(ctx, ref)
	if err != nil {
		return nil, err
	}
	if signed.Method != "" && !strings.EqualFold(signed.Method, http.MethodGet) {
		return nil, fmt.Errorf("presign answered method %q for a get", signed.Method)
	}
	body, _, err := r.opt.Downloads.Get(ctx, signed.URL, signed.Headers, limit)
	if err != nil {
		return nil, err
	}
	return body, nil
}

// presign asks the control plane for a URL to get ref from.
func (r *Resolver) presign(ctx context.Context, ref wire.PayloadRef) (wire.PresignResponse, error) {
	body, err := (&wire.PresignRequest{Op: "get", Key: ref.Key}).MarshalMsg(nil)
	if err != nil {
		return wire.PresignResponse{}, fmt.Errorf("encode presign: %w", err)
	}
	req := &transport.Request{Endpoint: wire.PathPresign(ref.Bucket), Body: body, Lane: transport.LaneControl}
	resp, err := r.opt.Transport.RoundTrip(ctx, req)
	if err != nil {
		return wire.PresignResponse{}, fmt.Errorf("presign: %w", err)
	}
	if err := transport.Check(req, resp); err != nil {
		if code, msg := wire.ErrorCode(resp.Body); code != "" {
			return wire.PresignResponse{}, fmt.Errorf("presign %s: status %d: %s", req.Endpoint, resp.Status, strings.TrimSpace(code+" "+msg))
		}
		return wire.PresignResponse{}, fmt.Errorf("presign: %w", err)
	}
	if len(resp.Body) > maxPresignReply {
		return wire.PresignResponse{}, fmt.Errorf("presign: a reply of %d bytes, over %d", len(resp.Body), maxPresignReply)
	}
	var out wire.PresignResponse
	if _, err := out.UnmarshalMsg(resp.Body); err != nil {
		return wire.PresignResponse{}, fmt.Errorf("presign: decode reply: %w", err)
	}
	return out, nil
}
