package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Snapshot writes a consistent copy of the database at dbPath to dst (which must not exist)
// with SQLite's VACUUM INTO: online, while a daemon keeps writing (it sees one transaction's
// state, never a torn one), and compact. dst is a plain database (no WAL), mode 0600.
func Snapshot(ctx context.Context, dbPath, dst string) error {
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("opening store %s: %w", dbPath, err)
	}
	defer db.Close()
	if err := restrictFile(dst); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "VACUUM INTO '"+strings.ReplaceAll(dst, "'", "''")+"'"); err != nil {
		return fmt.Errorf("copying the store: %w", err)
	}
	return nil
}

// SnapshotVersions returns every stored version of the database at path (a Snapshot) as
// function and hash pairs, read-only.
func SnapshotVersions(ctx context.Context, path string) ([]Version, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT function, hash FROM versions ORDER BY function, hash`)
	if err != nil {
		return nil, fmt.Errorf("listing versions: %w", err)
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		var v Version
		if err := rows.Scan(&v.Function, &v.Hash); err != nil {
			return nil, fmt.Errorf("listing versions: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
