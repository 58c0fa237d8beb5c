package planeserver

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"

	"github.com/nymphd/nymph/wirecore/plane"
	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

// isJSON reports whether the request's body is JSON.
func isJSON(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == wire.ContentTypeJSON
}

// decodeMsgpack decodes a whole body; trailing bytes are an error.
func decodeMsgpack(body []byte, dst msgp.Unmarshaler) error {
	rest, err := dst.UnmarshalMsg(body)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d trailing bytes after the message", len(rest))
	}
	return nil
}

// writeError answers {error: msg} as msgpack, or JSON when asJSON.
func writeError(w http.ResponseWriter, status int, asJSON bool, msg string) {
	_ = writeBody(w, status, asJSON, plane.ErrorBody{Error: msg})
}

// writeBody encodes a reply body as msgpack (daemon routes) or JSON; the
// error is the connection's.
func writeBody(w http.ResponseWriter, status int, asJSON bool, body any) error {
	var out []byte
	var err error
	ct := wire.ContentTypeMsgpack
	if asJSON {
		ct = wire.ContentTypeJSON
		if _, ok := body.(plane.OK); ok {
			out = []byte("{}")
		} else {
			out, err = json.Marshal(body)
		}
	} else {
		out, err = plane.AppendMsgpack(nil, body)
	}
	if err != nil {
		status, ct = http.StatusInternalServerError, "text/plain; charset=utf-8"
		out = []byte("encoding reply: " + err.Error())
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(status)
	_, err = w.Write(out)
	return err
}
