package planeserver

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

// operatorRoutes are the patterns of the operator API's POST routes that
// decode a JSON body, in the order FuzzOperatorBody's route byte picks them.
var operatorRoutes = []string{operator.PathExec, operator.PathSetup, operator.PathHibernate, operator.PathUpdate, operator.PathInvocations}

// operatorRequest makes the request the POST route of pattern makes of
// body, by that route's own row of adminRouteTable, for workerID.
func operatorRequest(pattern, workerID string, body []byte) (plane.Request, error) {
	for _, rt := range adminRouteTable {
		if rt.method == http.MethodPost && rt.pattern == pattern {
			return rt.request(workerID, body)
		}
	}
	panic("no POST route " + pattern)
}

// FuzzOperatorBody fuzzes the JSON bodies of the operator API's POST
// routes as their handlers read them, then steps the event into the
// fixture's plane core. An operator is trusted with commands, not with
// the server: whatever the bytes, the answer must be a status the API
// documents, with a body that encodes as JSON.
func FuzzOperatorBody(f *testing.F) {
	seeds := map[string][]string{
		operator.PathExec: {
			`{"command": "echo hi", "env": {"A": "b"}, "stdin": "x", "workdir": "/tmp", "timeout_s": 2.5, "stream": true, "flush_ms": 100, "flush_bytes": 4096}`,
			`{"command": "", "timeout_s": -1}`,
			`{"command": "true", "timeout_s": 1e308, "flush_ms": -5}`,
			`{"command": "\u001b]0;x\u0007", "env": {"": "\u0000"}}`,
		},
		operator.PathSetup:     {`{"script": "apt-get install -y jq", "sudo": true, "refresh_capabilities": true, "name": "jq"}`, `{"script": ""}`},
		operator.PathHibernate: {`{"until_epoch_s": 1764410000.5}`, `{"until_epoch_s": -1e308}`},
		operator.PathUpdate:    {`{"version": "1.2.3", "url": "https://example.invalid/nymph", "sha256": "00"}`, `{"version": ""}`},
		operator.PathInvocations: {
			`{"queue": "default", "function": {"module": "m", "qualname": "f"}, "run_config": {}, "args_blob": "AAE=", "required_tags": ["gpu=1"]}`,
			`{"function": {}, "script": "", "as_user": "root"}`,
		},
	}
	for i, route := range operatorRoutes {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte(`null`))
		f.Add(uint8(i), []byte(`[`))
		for _, s := range seeds[route] {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, routeIndex uint8, body []byte) {
		route := operatorRoutes[int(routeIndex)%len(operatorRoutes)]
		fx := newFuzzFixture(t)
		req, err := operatorRequest(route, fx.worker, body)
		if err != nil {
			return // 400 malformed request body
		}
		r := fx.step(t, req)
		switch r.Status {
		case plane.StatusOK, plane.StatusBadRequest, plane.StatusNotFound, plane.StatusConflict,
			plane.StatusUnprocessableEntity, plane.StatusServiceUnavailable:
		default:
			t.Fatalf("%s: status %d %#v", route, r.Status, r.Body)
		}
		if _, err := json.Marshal(r.Body); err != nil {
			t.Fatalf("%s: the answer %#v cannot be encoded as JSON: %v", route, r.Body, err)
		}
	})
}
