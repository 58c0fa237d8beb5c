package httpclient

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/nymphd/nymph/hostio/tlsca"
)

// Downloads fetches the files a control plane points a daemon at — an
// ota_update's binary, a presigned payload — without any credential: no
// bearer and no signature ever goes with them, whatever host the URL
// names. A URL on the control plane's own origin is verified against its
// CA file (a serve with its own CA), any other against the system roots;
// no redirect is followed.
type Downloads struct {
	own, public *http.Client
	origin      *url.URL
}

// NewDownloads builds the clients for the control plane at serverURL,
// verified by caFile (empty: the system roots).
func NewDownloads(serverURL, caFile string) (*Downloads, error) {
	origin, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("httpclient: parse server url %q: %w", serverURL, err)
	}
	own, err := downloadClient(caFile)
	if err != nil {
		return nil, err
	}
	public, err := downloadClient("")
	if err != nil {
		return nil, err
	}
	return &Downloads{own: own, public: public, origin: origin}, nil
}

// Client is the client for target: the control plane's own for its
// origin, the public one for any other.
func (d *Downloads) Client(target *url.URL) *http.Client {
	if strings.EqualFold(target.Scheme, d.origin.Scheme) && strings.EqualFold(target.Host, d.origin.Host) {
		return d.own
	}
	return d.public
}

// CheckURL reports whether raw is an absolute http(s) URL with a host, the
// only kind Downloads fetches; what names the URL in the error.
func CheckURL(what, raw string) (*url.URL, error) {
	target, err := url.Parse(raw)
	if err != nil || (target.Scheme != "https" && target.Scheme != "http") || target.Host == "" {
		return nil, fmt.Errorf("%s url %q: want http:// or https:// with a host", what, raw)
	}
	return target, nil
}

func downloadClient(caFile string) (*http.Client, error) {
	cfg, err := tlsca.ClientConfig(caFile)
	if err != nil {
		return nil, fmt.Errorf("httpclient: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, CheckRedirect: RefuseRedirect}, nil
}
