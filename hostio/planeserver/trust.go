package planeserver

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"time"

	"github.com/nymphd/nymph/wirecore/identity"
	"github.com/nymphd/nymph/wirecore/operator"
	"github.com/nymphd/nymph/wirecore/plane"
)

// createToken answers POST operator.PathTokens: the secret is drawn
// here, the plane keeps only its hash, and the operator sees it once, in
// the join line.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, MaxResultBody, true)
	if !ok {
		return
	}
	var in operator.TokenRequest
	if err := decodeJSON(body, &in); err != nil {
		adminError(w, http.StatusBadRequest, "malformed request body: "+err.Error())
		return
	}
	if s.cfg.CAFingerprint == "" {
		adminError(w, http.StatusConflict,
			"this control plane has no CA fingerprint (it serves without TLS): a join token pins the CA, so none can be minted")
		return
	}
	if in.TTLS < 0 || in.TTLS > plane.MaxTokenTTL.Seconds() {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("ttl_s %v: want more than 0 and at most %v", in.TTLS, plane.MaxTokenTTL.Seconds()))
		return
	}
	var random [identity.SecretBytes]byte
	if _, err := rand.Read(random[:]); err != nil {
		s.log.Error("draw a join token secret", "err", err)
		adminError(w, http.StatusInternalServerError, "drawing the token's secret failed")
		return
	}
	secret, _ := identity.NewSecret(random[:]) // SecretBytes bytes: cannot fail
	req := plane.CreateToken{SecretHash: identity.SecretHash(secret), TTL: time.Duration(in.TTLS * float64(time.Second)),
		Queue: in.Queue, Tags: in.Tags}
	_, rep, err := s.call(r.Context(), req)
	if err != nil {
		if r.Context().Err() == nil {
			adminError(w, http.StatusServiceUnavailable, err.Error())
		}
		return
	}
	created, ok := rep.Body.(operator.TokenCreated)
	if !ok {
		s.finishedAdmin(w, rep)
		return
	}
	created.Token = identity.JoinToken{Secret: secret, Fingerprint: s.cfg.CAFingerprint}.String()
	created.JoinCommand = JoinCommand(s.cfg.PublicURL, created.Token)
	s.log.Info("minted a join token", "token_id", created.ID, "expires_at", created.ExpiresAt, "queue", in.Queue, "tags", in.Tags)
	_ = writeBody(w, http.StatusOK, true, created)
}

// JoinCommand is the line an operator runs on a host to join it.
func JoinCommand(publicURL, token string) string {
	return "nymph daemon join --server " + publicURL + " --token " + token
}
