package opclient

import (
	"context"
	"net/http"

	"github.com/nymphd/nymph/wirecore/operator"
)

// CreateToken mints a join token. The answer's Token and JoinCommand hold
// the secret, shown this once.
func (c *Client) CreateToken(ctx context.Context, req operator.TokenRequest) (operator.TokenCreated, error) {
	return post[operator.TokenCreated](ctx, c, operator.PathTokens, req)
}

// ListTokens lists every minted token, without secrets.
func (c *Client) ListTokens(ctx context.Context) ([]operator.Token, error) {
	return get[[]operator.Token](ctx, c, operator.PathTokens, nil)
}

// RevokeKey revokes a worker's key: no request signed by it is accepted
// after, and its host joins again only with a new token.
func (c *Client) RevokeKey(ctx context.Context, worker string) (operator.KeyRevoked, error) {
	return post[operator.KeyRevoked](ctx, c, path(operator.PathRevokeKey, worker), struct{}{})
}

// ForgetWorker forgets a lost worker (DELETE operator.PathWorker): its
// record and undelivered commands go; an active worker is refused 409.
func (c *Client) ForgetWorker(ctx context.Context, worker string) (operator.WorkerForgotten, error) {
	var out operator.WorkerForgotten
	err := c.do(ctx, http.MethodDelete, path(operator.PathWorker, worker), nil, nil, &out)
	return out, err
}
