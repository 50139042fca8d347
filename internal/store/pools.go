package store

import (
	"context"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// poolSchema is the runtime pools' table (internal/pool): one row per
// pool, its zygo.toml as sent. Scripts live on disk, content-addressed.
const poolSchema = `
CREATE TABLE IF NOT EXISTS pools (
	name       TEXT PRIMARY KEY,
	manifest   BLOB NOT NULL,
	created_at INTEGER NOT NULL
);`

// PoolRecord is one stored pool.
type PoolRecord struct {
	Name     string
	Manifest []byte // the zygo.toml it was made with
	Created  time.Time
}

// PutPool stores (or replaces) a pool's record.
func (s *Store) PutPool(ctx context.Context, p PoolRecord) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO pools (name, manifest, created_at) VALUES (?, ?, ?)
		ON CONFLICT(name) DO UPDATE SET manifest = excluded.manifest`, p.Name, p.Manifest, p.Created.UnixMilli())
	if err != nil {
		return fmt.Errorf("storing pool %q: %w", p.Name, err)
	}
	return nil
}

// Pools lists every stored pool by name.
func (s *Store) Pools(ctx context.Context) ([]PoolRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, manifest, created_at FROM pools ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing pools: %w", err)
	}
	defer rows.Close()
	var out []PoolRecord
	for rows.Next() {
		var p PoolRecord
		var ms int64
		if err := rows.Scan(&p.Name, &p.Manifest, &ms); err != nil {
			return nil, fmt.Errorf("listing pools: %w", err)
		}
		p.Created = time.UnixMilli(ms)
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeletePool removes a pool's record; errdefs.ErrNotFound when there is none.
func (s *Store) DeletePool(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM pools WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("removing pool %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("pool %q: %w", name, errdefs.ErrNotFound)
	}
	return nil
}
