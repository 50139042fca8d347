package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Schema versions. The store's schema is a numbered list of steps; the file's
// PRAGMA user_version is the number of the last step it has. Open runs the
// steps above it, each in one transaction with the new user_version, so a
// crash leaves the file at a whole step. A file made before the steps were
// numbered has user_version 0 and any subset of the tables (sandbox tables
// were made only when sandboxes were enabled): every step is therefore
// idempotent (CREATE … IF NOT EXISTS, a column added only when missing).
// A step, once shipped, never changes: a new column or table is a new step,
// with a fixture of the schema before it in testdata (TestMigrationsFrom).
//
// The secrets table is internal/secret's (secret.Open creates it); it has
// never changed.
type migration struct {
	version int
	name    string
	up      func(ctx context.Context, tx *sql.Tx) error
}

var migrations = []migration{
	{1, "functions, versions and logs", ddl(schema)},
	{2, "sandboxes and checkpoints", ddl(sandboxSchema)},
	{3, "checkpoint image checksums", addColumn("checkpoints", "checksums",
		`ALTER TABLE checkpoints ADD COLUMN checksums TEXT NOT NULL DEFAULT ''`)},
	{4, "host ids", ddl(hostIDSchema)},
	{5, "the automatic host id range", ddl(hostRangeSchema)},
	{6, "sandbox network address", addColumn("sandboxes", "net_address",
		`ALTER TABLE sandboxes ADD COLUMN net_address TEXT NOT NULL DEFAULT ''`)},
	{7, "sandbox network MAC", addColumn("sandboxes", "net_mac",
		`ALTER TABLE sandboxes ADD COLUMN net_mac TEXT NOT NULL DEFAULT ''`)},
	// Branch remote (issue 18): named API tokens (tokens.go).
	{8, "api tokens", ddl(tokenSchema)},
	// Branch obs: the caller's X-Request-Id or traceparent trace id of a request's lines,
	// indexed only where set (a request found by it: Store.Logs).
	{9, "log lines' caller id", func(ctx context.Context, tx *sql.Tx) error {
		if err := addColumn("logs", "caller_id", `ALTER TABLE logs ADD COLUMN caller_id TEXT NOT NULL DEFAULT ''`)(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS logs_caller ON logs (function, caller_id) WHERE caller_id != ''`)
		return err
	}},
	// Branch deployops: when each version was last made active (rollback's
	// default target, `zygo versions`' order); 0 for rows from before.
	{10, "version activation time", addColumn("versions", "activated_at",
		`ALTER TABLE versions ADD COLUMN activated_at INTEGER NOT NULL DEFAULT 0`)},
	// Branch pools: runtime pools (pools.go).
	{11, "runtime pools", ddl(poolSchema)},
	// Branch fixd: an imported checkpoint's origin (JSON of sandbox.CheckpointOrigin; '' for
	// one taken here).
	{12, "imported checkpoints' origin", addColumn("checkpoints", "origin",
		`ALTER TABLE checkpoints ADD COLUMN origin TEXT NOT NULL DEFAULT ''`)},
}

// SchemaVersion is the user_version of a store this daemon has opened.
var SchemaVersion = migrations[len(migrations)-1].version

func ddl(stmts string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, stmts)
		return err
	}
}

// addColumn returns a step that runs alter when table has no column named column.
func addColumn(table, column, alter string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, table, column).Scan(&n)
		if err != nil {
			return fmt.Errorf("reading the columns of %s: %w", table, err)
		}
		if n > 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, alter)
		return err
	}
}

// migrate brings db to SchemaVersion. Errors: a file of a newer daemon
// (user_version above SchemaVersion) is refused untouched; a failed step is
// rolled back and named.
func migrate(ctx context.Context, db *sql.DB) error {
	var cur int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&cur); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if cur > SchemaVersion {
		return fmt.Errorf("the store has schema version %d, newer than this daemon's %d: run a newer zygo", cur, SchemaVersion)
	}
	for _, m := range migrations {
		if m.version <= cur {
			continue
		}
		if err := step(ctx, db, m); err != nil {
			return fmt.Errorf("migrating the store to version %d (%s): %w", m.version, m.name, err)
		}
	}
	return nil
}

func step(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	if err := m.up(ctx, tx); err != nil {
		return err
	}
	// PRAGMA takes no parameters; m.version is one of the constants above.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, m.version)); err != nil {
		return err
	}
	return tx.Commit()
}
