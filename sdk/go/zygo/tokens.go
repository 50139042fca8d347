package zygo

import (
	"context"
	"net/url"

	"github.com/zygo-run/zygo/sdk/go/wire"
)

// CreateToken makes an API token called name for the daemon's TCP listener and returns it
// with its secret, which the daemon never shows again. Only a client on the unix socket may
// (over TCP: an *Error with wire.CodePermissionDenied). Errors: IsBadRequest for a bad name,
// IsConflict when it is taken.
func (c *Client) CreateToken(ctx context.Context, name string) (wire.TokenCreated, error) {
	var t wire.TokenCreated
	return t, c.call(ctx, "POST", "/v1/tokens", wire.CreateTokenBody{Name: name}, &t)
}

// Tokens returns every API token's record (never a secret), by name, following the pages.
func (c *Client) Tokens(ctx context.Context) ([]wire.Token, error) {
	out := []wire.Token{}
	cursor := ""
	for {
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page wire.TokensPage
		if err := c.call(ctx, "GET", "/v1/tokens?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.NextCursor == "" {
			return out, nil
		}
		cursor = page.NextCursor
	}
}

// RevokeToken deletes the API token name: calls carrying it get 401 from then on. Only a
// client on the unix socket may. Errors: IsNotFound when there is no such token.
func (c *Client) RevokeToken(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", "/v1/tokens/"+url.PathEscape(name), nil, nil)
}
