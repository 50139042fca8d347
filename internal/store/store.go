// Package store is Zygo's embedded database: one SQLite file
// (modernc.org/sqlite, no cgo) in the state directory, holding the function
// registry (functions and their immutable versions), request logs and the
// host uids handed to functions and sandboxes (hostids.go). Later
// tables (secrets, sandboxes, checkpoints) live here too.
//
// A Store is safe for concurrent use. Errors for missing rows wrap
// errdefs.ErrNotFound.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Store is an open registry database.
type Store struct {
	db   *sql.DB
	idMu sync.Mutex // serialises AcquireHostID and ReleaseHostID
	// logRetention is how many lines each function keeps (SetLogRetention); 0 is
	// DefaultLogRetentionLines.
	logRetention atomic.Int64
	// logs are AppendLogs' prepared statements (logs.go).
	logs logStatements
	// logCounts are the functions' log row counts AppendLogs prunes by (logs.go).
	logCounts logCounts
}

// schema is step 1 of migrate.go: the first daemon's tables.
const schema = `
CREATE TABLE IF NOT EXISTS functions (
	name           TEXT PRIMARY KEY,
	active_version TEXT NOT NULL,
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
	function   TEXT NOT NULL,
	hash       TEXT NOT NULL,
	manifest   TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (function, hash)
);
CREATE TABLE IF NOT EXISTS logs (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	function   TEXT NOT NULL,
	version    TEXT NOT NULL,
	request_id TEXT NOT NULL,
	stream     TEXT NOT NULL,
	at         INTEGER NOT NULL,
	line       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS logs_function ON logs (function, id);
CREATE INDEX IF NOT EXISTS logs_request ON logs (request_id);
`

// walLimitBytes is what the WAL file keeps of its size after a checkpoint.
const walLimitBytes = 4 << 20

// Open opens (creating if needed) the database at path. The caller owns the
// returned Store and must Close it.
func Open(ctx context.Context, path string) (*Store, error) {
	// The database holds logs, tokens and records: only its owner may read
	// it. SQLite gives the -wal and -shm files the database file's mode.
	if err := restrictFile(path); err != nil {
		return nil, err
	}
	// journal_size_limit: once a checkpoint has copied the WAL into the
	// database, the WAL file is truncated to at most walLimitBytes, so a
	// burst of writes (logs) does not keep its disk.
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)" +
		fmt.Sprintf("&_pragma=journal_size_limit(%d)", walLimitBytes)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.logs.close()
	return s.db.Close()
}

// DB returns the underlying handle, for packages that keep their own tables
// in the same file (they must create them with CREATE TABLE IF NOT EXISTS;
// the store's own tables are made by the numbered steps of migrate.go).
func (s *Store) DB() *sql.DB { return s.db }

// Version is one immutable, content-addressed version of a function.
type Version struct {
	Function  string
	Hash      string // "sha256:<hex>"
	Manifest  []byte // the validated manifest as JSON
	CreatedAt time.Time
	// DeployedAt is when the version was last made active (SetActive); its
	// CreatedAt when that is not recorded (stored by an older daemon, or
	// never made active: a deploy stores a version only once it has started).
	DeployedAt time.Time
}

// FunctionRecord is a deployed function and its active version.
type FunctionRecord struct {
	Name      string
	Active    Version
	CreatedAt time.Time
	UpdatedAt time.Time
}

// PutVersion records a version; storing the same (function, hash) twice is a
// no-op that keeps the first record.
func (s *Store) PutVersion(ctx context.Context, v Version) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT OR IGNORE INTO versions (function, hash, manifest, created_at) VALUES (?, ?, ?, ?)`,
		v.Function, v.Hash, string(v.Manifest), time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("storing version %s of %s: %w", v.Hash, v.Function, err)
	}
	return nil
}

// SetActive points function at version hash (which must have been stored
// with PutVersion), creating the function record if needed, and records
// now as the version's DeployedAt.
func (s *Store) SetActive(ctx context.Context, function, hash string) error {
	now := time.Now().UnixMilli()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("activating %s of %s: %w", hash, function, err)
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO functions (name, active_version, created_at, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET active_version = excluded.active_version, updated_at = excluded.updated_at`,
		function, hash, now, now); err != nil {
		return fmt.Errorf("activating %s of %s: %w", hash, function, err)
	}
	// Strictly increasing per function, so that two activations in one
	// millisecond keep their order.
	if _, err := tx.ExecContext(ctx, `
		UPDATE versions SET activated_at = max(?, (SELECT coalesce(max(activated_at), 0) + 1 FROM versions WHERE function = ?))
		WHERE function = ? AND hash = ?`, now, function, function, hash); err != nil {
		return fmt.Errorf("activating %s of %s: %w", hash, function, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("activating %s of %s: %w", hash, function, err)
	}
	return nil
}

// Function returns a function and its active version; errdefs.ErrNotFound if
// there is none.
func (s *Store) Function(ctx context.Context, name string) (FunctionRecord, error) {
	row := s.db.QueryRowContext(ctx, `
		SELECT f.name, f.created_at, f.updated_at, v.hash, v.manifest, v.created_at
		FROM functions f JOIN versions v ON v.function = f.name AND v.hash = f.active_version
		WHERE f.name = ?`, name)
	r, err := scanFunction(row)
	if errors.Is(err, sql.ErrNoRows) {
		return FunctionRecord{}, fmt.Errorf("function %q: %w", name, errdefs.ErrNotFound)
	}
	return r, err
}

// Functions lists every deployed function, sorted by name.
func (s *Store) Functions(ctx context.Context) ([]FunctionRecord, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT f.name, f.created_at, f.updated_at, v.hash, v.manifest, v.created_at
		FROM functions f JOIN versions v ON v.function = f.name AND v.hash = f.active_version
		ORDER BY f.name`)
	if err != nil {
		return nil, fmt.Errorf("listing functions: %w", err)
	}
	defer rows.Close()
	var out []FunctionRecord
	for rows.Next() {
		r, err := scanFunction(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

type scanner interface{ Scan(dest ...any) error }

func scanFunction(sc scanner) (FunctionRecord, error) {
	var r FunctionRecord
	var created, updated, vcreated int64
	var manifest string
	if err := sc.Scan(&r.Name, &created, &updated, &r.Active.Hash, &manifest, &vcreated); err != nil {
		return r, err
	}
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
	r.Active = Version{Function: r.Name, Hash: r.Active.Hash, Manifest: []byte(manifest), CreatedAt: time.UnixMilli(vcreated)}
	return r, nil
}

// Versions lists the stored versions of function, the most recently
// deployed first (DeployedAt; a version stored but never made active by
// when it was stored); none is not an error.
func (s *Store) Versions(ctx context.Context, function string) ([]Version, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT hash, manifest, created_at, activated_at FROM versions WHERE function = ?
		ORDER BY CASE WHEN activated_at > 0 THEN activated_at ELSE created_at END DESC, rowid DESC`, function)
	if err != nil {
		return nil, fmt.Errorf("listing versions of %s: %w", function, err)
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		v := Version{Function: function}
		var manifest string
		var created, activated int64
		if err := rows.Scan(&v.Hash, &manifest, &created, &activated); err != nil {
			return nil, fmt.Errorf("listing versions of %s: %w", function, err)
		}
		v.Manifest, v.CreatedAt, v.DeployedAt = []byte(manifest), time.UnixMilli(created), time.UnixMilli(created)
		if activated > 0 {
			v.DeployedAt = time.UnixMilli(activated)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// DeleteVersion removes one stored version of function. It refuses
// (errdefs.ErrFailedPrecondition) the active version; a version that is not
// stored is not an error.
func (s *Store) DeleteVersion(ctx context.Context, function, hash string) error {
	res, err := s.db.ExecContext(ctx, `
		DELETE FROM versions WHERE function = ? AND hash = ?
		AND NOT EXISTS (SELECT 1 FROM functions WHERE name = ? AND active_version = ?)`,
		function, hash, function, hash)
	if err != nil {
		return fmt.Errorf("deleting version %s of %s: %w", hash, function, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var active int
		_ = s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM functions WHERE name = ? AND active_version = ?`, function, hash).Scan(&active)
		if active > 0 {
			return fmt.Errorf("%w: version %s of %s is active", errdefs.ErrFailedPrecondition, hash, function)
		}
	}
	return nil
}

// DeleteFunction removes a function, its versions and its logs;
// errdefs.ErrNotFound if it does not exist.
func (s *Store) DeleteFunction(ctx context.Context, name string) error {
	s.logCounts.mu.Lock()
	defer s.logCounts.mu.Unlock()
	s.logCounts.forget(name) // its rows go, or the count is taken again
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM functions WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("deleting function %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("function %q: %w", name, errdefs.ErrNotFound)
	}
	for _, q := range []string{`DELETE FROM versions WHERE function = ?`, `DELETE FROM logs WHERE function = ?`} {
		if _, err := tx.ExecContext(ctx, q, name); err != nil {
			return fmt.Errorf("deleting function %q: %w", name, err)
		}
	}
	return tx.Commit()
}

// restrictFile creates path (mode 0600) if missing and makes sure an
// existing one, and its WAL and shared-memory files, are 0600.
func restrictFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("opening store %s: %w", path, err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("restricting %s: %w", p, err)
		}
	}
	return nil
}
