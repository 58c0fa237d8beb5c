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
		out, err = appendMsgpack(nil, body)
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

func appendMsgpack(b []byte, body any) ([]byte, error) {
	switch v := body.(type) {
	case plane.OK:
		return msgp.AppendMapHeader(b, 0), nil
	case plane.ErrorBody:
		if v.Message == "" {
			b = msgp.AppendMapHeader(b, 1)
			return msgp.AppendString(msgp.AppendString(b, "error"), v.Error), nil
		}
		b = msgp.AppendMapHeader(b, 2)
		b = msgp.AppendString(msgp.AppendString(b, "error"), v.Error)
		return msgp.AppendString(msgp.AppendString(b, "message"), v.Message), nil
	case wire.HelloResponse:
		return v.MarshalMsg(b)
	case wire.PollResponse:
		return v.MarshalMsg(b)
	case wire.ValidationError:
		return v.MarshalMsg(b)
	case wire.PresignResponse:
		return v.MarshalMsg(b)
	case wire.KeyRotationResponse:
		return v.MarshalMsg(b)
	}
	return b, fmt.Errorf("no msgpack encoding for %T", body)
}
