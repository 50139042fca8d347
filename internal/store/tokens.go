package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// API tokens: the bearer tokens the daemon's TCP listener accepts (internal/api, tokens.go),
// by name. Only the SHA-256 of each secret is kept; the secret itself is shown once, by
// `zygo token create`. The token named "default" is the one of STATE/api.token.
const tokenSchema = `
CREATE TABLE IF NOT EXISTS api_tokens (
	name         TEXT PRIMARY KEY,
	hash         BLOB NOT NULL UNIQUE, -- SHA-256 of the secret, 32 bytes
	created_at   INTEGER NOT NULL,     -- unix ms
	last_used_at INTEGER NOT NULL DEFAULT 0 -- unix ms; 0: never
);
`

// Token is an API token's record.
type Token struct {
	Name       string
	Hash       []byte // SHA-256 of the secret
	CreatedAt  time.Time
	LastUsedAt time.Time // zero: never used
}

// PutToken records a new token. Errors: errdefs.ErrExists when the name is taken, or the
// database's error.
func (s *Store) PutToken(ctx context.Context, t Token) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_tokens (name, hash, created_at) VALUES (?, ?, ?)`,
		t.Name, t.Hash, t.CreatedAt.UnixMilli())
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("token %q: %w", t.Name, errdefs.ErrExists)
	}
	return err
}

// SetToken records t under its name, replacing the hash and creation time of a token of that
// name with another hash, and keeping the record as it is when the hash is the same.
func (s *Store) SetToken(ctx context.Context, t Token) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_tokens (name, hash, created_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, created_at = excluded.created_at, last_used_at = 0
		WHERE api_tokens.hash != excluded.hash`, t.Name, t.Hash, t.CreatedAt.UnixMilli())
	return err
}

// Tokens returns every token, by name.
func (s *Store) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, hash, created_at, last_used_at FROM api_tokens ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		var t Token
		var created, used int64
		if err := rows.Scan(&t.Name, &t.Hash, &created, &used); err != nil {
			return nil, err
		}
		t.CreatedAt = time.UnixMilli(created)
		if used != 0 {
			t.LastUsedAt = time.UnixMilli(used)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteToken removes the token name. Errors: errdefs.ErrNotFound when there is none.
func (s *Store) DeleteToken(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM api_tokens WHERE name = ?`, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("token %q: %w", name, errdefs.ErrNotFound)
	}
	return nil
}

// TouchToken records that the token name was used at at. A token revoked meanwhile is no
// error.
func (s *Store) TouchToken(ctx context.Context, name string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE api_tokens SET last_used_at = ? WHERE name = ?`, at.UnixMilli(), name)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}
