// Package signer is the daemon's identity on the wire: a transport that
// signs every request with the host's Ed25519 key (docs/protocol.md,
// "Request signatures"), and the key rotation that replaces that key.
//
// It decides the nonce (fresh random bytes per request), the timestamp
// (the host clock), the audience (the control plane's origin) and the
// path a signature covers; it recognises the control plane's word that
// the key is revoked and reports it. It does not decide what a revoked
// key means for the daemon (the daemon core exits), where the key file
// lives, or when to rotate (the control plane's rotate_key command).
package signer

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nymphd/nymph/hostio/transport"
	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/wire"
)

// Options configure a Transport.
type Options struct {
	// Next carries the signed requests; required.
	Next transport.Transport
	// Key is the host's identity; required.
	Key ed25519.PrivateKey
	// ServerURL is [server] url: its origin is the audience of every
	// signature, the same through a relay as direct.
	ServerURL string
	// Random supplies nonces (crypto/rand.Reader); required.
	Random io.Reader
	// Now reads the clock (default time.Now).
	Now func() time.Time
	// Revoked is called, once, with the control plane's message when it
	// answers that this key is revoked.
	Revoked func(message string)
}

// Transport signs each request and hands it to the next transport.
type Transport struct {
	next     transport.Transport
	audience string
	random   io.Reader
	now      func() time.Time
	revoked  func(string)
	once     sync.Once

	mu  sync.RWMutex
	key ed25519.PrivateKey
	id  string
}

var _ transport.Transport = (*Transport)(nil)

// New checks the options and builds the transport.
func New(opts Options) (*Transport, error) {
	if opts.Next == nil || opts.Random == nil || len(opts.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("signer: a next transport, a random source and an Ed25519 key are required")
	}
	aud, err := Audience(opts.ServerURL)
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Revoked == nil {
		opts.Revoked = func(string) {}
	}
	t := &Transport{next: opts.Next, audience: aud, random: opts.Random, now: opts.Now, revoked: opts.Revoked}
	t.setKey(opts.Key)
	return t, nil
}

// Audience is the origin of a control plane URL, as signatures name it:
// scheme://host[:port], lowercased, without path.
func Audience(serverURL string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(serverURL))
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("signer: server url %q: want http(s)://host[:port], the audience of every signature", serverURL)
	}
	return identity.Audience(u), nil
}

func (t *Transport) setKey(key ed25519.PrivateKey) {
	t.mu.Lock()
	t.key, t.id = key, identity.KeyID(key.Public().(ed25519.PublicKey))
	t.mu.Unlock()
}

func (t *Transport) current() (ed25519.PrivateKey, string) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.key, t.id
}

// KeyID is the id of the key requests are signed with now.
func (t *Transport) KeyID() string { _, id := t.current(); return id }

// PublicKey is the current key as the hello's public_key carries it.
func (t *Transport) PublicKey() string {
	key, _ := t.current()
	return identity.EncodePublicKey(key.Public().(ed25519.PublicKey))
}

// CanWithdraw is the next transport's answer.
func (t *Transport) CanWithdraw() bool { return t.next.CanWithdraw() }

// RoundTrip signs req (a copy: the caller's headers are left alone) and
// sends it.
func (t *Transport) RoundTrip(ctx context.Context, req *transport.Request) (*transport.Response, error) {
	key, id := t.current()
	signed, _, err := t.sign(req, key, id)
	if err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(ctx, signed)
	if err == nil {
		t.checkRevoked(resp)
	}
	return resp, err
}

// sign returns a copy of req carrying the signature of key (named id).
func (t *Transport) sign(req *transport.Request, key ed25519.PrivateKey, id string) (*transport.Request, identity.Signature, error) {
	var raw [identity.NonceBytes]byte
	if _, err := io.ReadFull(t.random, raw[:]); err != nil {
		return nil, identity.Signature{}, fmt.Errorf("signer: draw a nonce: %w", err)
	}
	path, err := SignedPath(req.Endpoint)
	if err != nil {
		return nil, identity.Signature{}, err
	}
	s := identity.Signature{KeyID: id, Timestamp: t.now().Unix(), Nonce: identity.EncodeNonce(raw[:]), Audience: t.audience}
	identity.Sign(key, identity.NewRequest("POST", path, req.Body), &s)
	cp := *req
	cp.Headers = make(map[string]string, len(req.Headers)+len(identity.SignedHeaders))
	for k, v := range req.Headers {
		cp.Headers[k] = v
	}
	for k, v := range s.Header() {
		cp.Headers[k] = v
	}
	return &cp, s, nil
}

// SignedPath is the path a signature of a request to endpoint covers: the
// endpoint itself, or for a log-sink URL the server handed out, that URL's
// path; never the query.
func SignedPath(endpoint string) (string, error) {
	if strings.HasPrefix(endpoint, "/") {
		path, _, _ := strings.Cut(endpoint, "?")
		return path, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Path == "" {
		return "", fmt.Errorf("signer: endpoint %q: neither a path nor a URL with one", endpoint)
	}
	return u.EscapedPath(), nil
}

// checkRevoked reports a 401 whose body says the key is revoked.
func (t *Transport) checkRevoked(resp *transport.Response) {
	if resp.Status != 401 {
		return
	}
	code, msg := wire.ErrorCode(resp.Body)
	if code != wire.ErrKeyRevoked {
		return
	}
	t.once.Do(func() { t.revoked(msg) })
}
