package wire

// Downloads through a relay **(nymph)** (docs/protocol.md, "Relay
// framing", "Downloads through a relay"). A relay carries only POSTs of
// endpoint paths, never a GET and never a query, so a daemon behind one
// fetches a URL on the control plane's origin (a presigned payload, an
// ota_update's binary) as a POST, with an empty body, of the URL's path,
// the URL's query riding in HeaderDownloadQuery. The control plane answers
// that POST as it answers the GET of the URL.
//
// The routes a relay admits for it are BlobPathPrefix followed by a
// namespace and a key of at most MaxRelayedBlobKeySegments segments
// (PatternBlob), and operator.PathRelease ("/v1/releases/{name}"), which
// keeps its home beside the other routes of serve.
const (
	// HeaderDownloadQuery carries a download's query (the URL's raw query,
	// without the "?") through a relay, which forwards X-LS-* headers only.
	// The X-LS- prefix is what a relay forwards.
	HeaderDownloadQuery = "X-LS-Download-Query"

	// BlobPathPrefix is where a control plane serves presigned payload
	// URLs: BlobPathPrefix + namespace + "/" + key.
	BlobPathPrefix = "/v1/blobs/"

	// PatternBlob is a presigned payload URL's path as a ServeMux pattern:
	// one namespace segment, then the key's segments.
	PatternBlob = BlobPathPrefix + "{ns}/{key...}"

	// MaxRelayedBlobKeySegments bounds how many segments a blob key may
	// have for its download to pass a relay. A key with more is still
	// served directly, but a relay refuses its endpoint.
	MaxRelayedBlobKeySegments = 16
)
