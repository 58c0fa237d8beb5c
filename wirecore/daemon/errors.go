package daemon

import (
	"strconv"

	"github.com/nymphd/nymph/wirecore/wire"
)

// isUnknownWorker recognises the 404 body {error: "unknown_worker"}.
func isUnknownWorker(body []byte) bool {
	v, ok := wire.ReadRefusal(body)
	return ok && v.Error == "unknown_worker"
}

// validationText renders a 422 body so that the field is named first.
func validationText(body []byte) string {
	v, ok := wire.ReadRefusal(body)
	switch {
	case !ok:
		return "status 422" + bodySnippet(body)
	case v.Field != "":
		return "invalid field " + v.Field + ": " + v.Text()
	default:
		return "status 422: " + v.Text()
	}
}

// statusText describes a refusal that may heal (5xx, 408, 429): the
// status, and the body's {error, message} when it has them, so that a
// daemon that keeps retrying says why (a control plane whose worker
// limit is reached).
func statusText(status int, body []byte) string {
	if v, ok := wire.ReadRefusal(body); ok {
		return errText(nil, status) + ": " + v.Text()
	}
	return errText(nil, status)
}

// refusalText describes a refusal that will not heal: the body's {error,
// message} when it has them (a control plane's, or a relay's own refusal
// as its client hands it on), else the body's first bytes.
func refusalText(status int, body []byte) string {
	if v, ok := wire.ReadRefusal(body); ok {
		return errText(nil, status) + ": " + v.Text()
	}
	return errText(nil, status) + bodySnippet(body)
}

// errText describes a failed request: the transport error, or the status.
func errText(err error, status int) string {
	if err != nil {
		return err.Error()
	}
	if status == 0 {
		return "no response"
	}
	return "status " + strconv.Itoa(status)
}

// bodySnippet quotes at most 200 bytes of a body, for an error message.
func bodySnippet(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return ": " + strconv.Quote(string(body))
}
