package wire

import "time"

// Tokens (POST /v1/tokens, GET /v1/tokens, DELETE /v1/tokens/{name}): the named bearer tokens
// the daemon's TCP listener accepts. Creating and revoking are refused over TCP (403,
// CodePermissionDenied): only the daemon's own user, on its unix socket, may.

// CreateTokenBody is the body of POST /v1/tokens.
type CreateTokenBody struct {
	// Name: 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit.
	Name string `json:"name"`
}

// Token is a token's record; its secret is never in it.
type Token struct {
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"` // absent: never used (recorded to the minute)
}

// TokenCreated is the answer to POST /v1/tokens (201): the record and the secret, which the
// daemon keeps only as a SHA-256 digest and never shows again.
type TokenCreated struct {
	Token
	Secret string `json:"secret"`
}

// TokensPage is a page of GET /v1/tokens (wire.Page), by name.
type TokensPage = Page[Token]
