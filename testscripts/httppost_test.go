package testscripts

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/vmihailenco/msgpack/v5"
)

// cmdHTTPPost posts a body to a URL and prints "status N" and the answer
// (a msgpack answer is printed as JSON), so a script can send the bad
// requests a real daemon never would.
//
//	httppost [-bearer FILE] [-msgpack] [-type CT] [-size N] URL [FILE]
//
// -msgpack reads FILE as JSON and sends it msgpack-encoded (a map with
// string keys, as protocol "1" wants); -size sends N bytes of 'a' instead
// of a file; without either, FILE's bytes are sent as they are. An https
// URL is verified by $NYMPH_CA_FILE, as waitfor's.
func cmdHTTPPost(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("httppost", flag.ContinueOnError)
	bearer := fs.String("bearer", "", "file holding the bearer token")
	asMsgpack := fs.Bool("msgpack", false, "encode FILE (JSON) as msgpack")
	ctype := fs.String("type", "", "Content-Type (default: msgpack with -msgpack, else octets)")
	size := fs.Int("size", -1, "send this many bytes of 'a'")
	if err := fs.Parse(args); err != nil || fs.NArg() < 1 || fs.NArg() > 2 {
		ts.Fatalf("usage: httppost [-bearer FILE] [-msgpack] [-type CT] [-size N] URL [FILE]")
	}
	var body []byte
	switch {
	case *size >= 0:
		body = bytes.Repeat([]byte{'a'}, *size)
	case fs.NArg() == 2:
		data, err := os.ReadFile(ts.MkAbs(fs.Arg(1)))
		ts.Check(err)
		body = data
	}
	if *asMsgpack {
		var v any
		ts.Check(json.Unmarshal(body, &v))
		enc, err := msgpack.Marshal(v)
		ts.Check(err)
		body = enc
		if *ctype == "" {
			*ctype = "application/x-msgpack"
		}
	}
	if *ctype == "" {
		*ctype = "application/octet-stream"
	}
	req, err := http.NewRequest(http.MethodPost, fs.Arg(0), bytes.NewReader(body))
	ts.Check(err)
	req.Header.Set("Content-Type", *ctype)
	req.Header.Set("Accept", "application/x-msgpack")
	if *bearer != "" {
		tok, err := os.ReadFile(ts.MkAbs(*bearer))
		ts.Check(err)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	hc, err := scriptClient(ts, fs.Arg(0), 30*time.Second)
	ts.Check(err)
	resp, err := hc.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	ts.Check(err)
	if strings.Contains(resp.Header.Get("Content-Type"), "msgpack") {
		var v any
		if msgpack.Unmarshal(answer, &v) == nil {
			var j bytes.Buffer
			enc := json.NewEncoder(&j)
			enc.SetEscapeHTML(false) // URLs keep their & readable
			if enc.Encode(v) == nil {
				answer = bytes.TrimSpace(j.Bytes())
			}
		}
	}
	fmt.Fprintf(ts.Stdout(), "status %d\n%s\n", resp.StatusCode, answer)
	if neg != (resp.StatusCode/100 != 2) {
		ts.Fatalf("httppost %s: status %d", fs.Arg(0), resp.StatusCode)
	}
}
