package planeserver

import "net/http"

// DownloadByPost answers a download through a relay with get, the handler
// of the URL's GET: a relay carries POSTs of endpoint paths only, so a
// daemon behind one asks for a URL on this server as a POST with no body
// (docs/protocol.md, "Downloads through a relay"), which is answered as
// the GET it stands for. get sees a GET, so that the answer is the same,
// with the conditional and range semantics of a GET (http.ServeContent
// goes by the method) and none of a POST's. A POST with a body (or one of
// unknown length) asks for something else, and is refused with a 400.
//
// It is the one rule for every download a relay carries: the releases
// (Config.Releases) and the blobs of a BlobStore (hostio/blobstore).
func DownloadByPost(get http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			http.Error(w, "a download POST has no body", http.StatusBadRequest)
			return
		}
		// A copy: the caller's request stays the POST it was.
		g := r.WithContext(r.Context())
		g.Method = http.MethodGet
		get(w, g)
	}
}
