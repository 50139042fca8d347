package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Snapshot writes a consistent copy of the database at dbPath to dst (which must not exist)
// with SQLite's VACUUM INTO: online, while a daemon keeps writing (it sees one transaction's
// state, never a torn one), and compact. dst is a plain database (no WAL), mode 0600, created
// here exclusively and never through a symbolic link: anything already at dst (a link
// included) is an error wrapping os.ErrExist, and nothing is written. dst's directory must be
// one no other user can change, since VACUUM INTO opens dst again by its path. The copy holds
// no sandbox records (dropSandboxes).
func Snapshot(ctx context.Context, dbPath, dst string) error {
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("opening store %s: %w", dbPath, err)
	}
	defer db.Close()
	// VACUUM INTO opens its target without O_EXCL or O_NOFOLLOW but accepts an empty file:
	// make that file here, ours.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("creating the store's copy: %w", err)
	}
	f.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO '"+strings.ReplaceAll(dst, "'", "''")+"'"); err != nil {
		return fmt.Errorf("copying the store: %w", err)
	}
	return dropSandboxes(ctx, dst)
}

// dropSandboxes deletes the sandbox records of the copy at path. A sandbox is a running
// engine instance, the daemon's that started it: a daemon on a restored store (on this host,
// beside the first) must never adopt, fail or destroy it, or take back its network. Checkpoint
// records stay (their images are copied with --checkpoints and restore into new sandboxes).
func dropSandboxes(ctx context.Context, path string) error {
	cp, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		return fmt.Errorf("opening the store's copy: %w", err)
	}
	defer cp.Close()
	var n int
	if err := cp.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sandboxes'`).Scan(&n); err != nil {
		return fmt.Errorf("reading the store's copy: %w", err)
	}
	if n == 0 {
		return nil // a store no sandbox registry ever opened
	}
	if _, err := cp.ExecContext(ctx, `DELETE FROM sandboxes`); err != nil {
		return fmt.Errorf("dropping the sandbox records of the store's copy: %w", err)
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
