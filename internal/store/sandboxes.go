package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
)

// sandboxSchema holds the sandbox and checkpoint records. Scalars have columns of their own
// (so the tables can be read with the sqlite3 shell); options and services are JSON. Tokens
// are columns too: the records leave them out of their JSON on purpose (json:"-"), so they
// must never travel through it. Times are Unix nanoseconds. This is step 2 of migrate.go, as
// it first shipped; checkpoints.checksums is step 3, checkpoints.origin step 12.
const sandboxSchema = `
CREATE TABLE IF NOT EXISTS sandboxes (
	id            TEXT PRIMARY KEY,
	name          TEXT NOT NULL UNIQUE,
	backend       TEXT NOT NULL,
	engine_id     TEXT NOT NULL,
	state         TEXT NOT NULL,
	parent_id     TEXT NOT NULL DEFAULT '',
	checkpoint_id TEXT NOT NULL DEFAULT '',
	generation    TEXT NOT NULL,
	token         TEXT NOT NULL,
	options       TEXT NOT NULL,
	services      TEXT NOT NULL,
	error         TEXT NOT NULL DEFAULT '',
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
	id          TEXT PRIMARY KEY,
	tag         TEXT NOT NULL DEFAULT '',
	sandbox_id  TEXT NOT NULL,
	parent_id   TEXT NOT NULL DEFAULT '',
	backend     TEXT NOT NULL,
	dir         TEXT NOT NULL,
	size_bytes  INTEGER NOT NULL,
	token       TEXT NOT NULL,
	generation  TEXT NOT NULL,
	hostname    TEXT NOT NULL,
	options     TEXT NOT NULL,
	created_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_parent ON checkpoints (parent_id);
`

// SandboxRegistry is sandbox.Registry on the store's SQLite file: tables sandboxes and
// checkpoints. Every write is one statement, so it is atomic without a transaction; name
// uniqueness and checkpoint immutability are the tables' own constraints. Safe for concurrent
// use. It does not own the Store: close that, not this.
type SandboxRegistry struct {
	db *sql.DB
}

var _ sandbox.Registry = (*SandboxRegistry)(nil)

// NewSandboxRegistry returns the registry on s's tables (made by Open's migrations; ctx is
// kept for the signature's stability). It never fails today.
func NewSandboxRegistry(_ context.Context, s *Store) (*SandboxRegistry, error) {
	return &SandboxRegistry{db: s.db}, nil
}

// sqliteCode returns the extended result code of a SQLite error, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

func isConstraint(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n) }

// PutSandbox implements sandbox.Registry.
func (r *SandboxRegistry) PutSandbox(ctx context.Context, rec sandbox.SandboxRecord) error {
	opts, err := json.Marshal(rec.Options)
	if err != nil {
		return fmt.Errorf("encoding options of %s: %w", rec.ID, err)
	}
	svcs, err := json.Marshal(rec.Services)
	if err != nil {
		return fmt.Errorf("encoding services of %s: %w", rec.ID, err)
	}
	var netAddr, netMAC string
	if rec.Net != nil {
		netAddr, netMAC = rec.Net.Address, rec.Net.MAC
	}
	_, err = r.db.ExecContext(ctx, `
		INSERT INTO sandboxes (id, name, backend, engine_id, state, parent_id, checkpoint_id,
			generation, token, options, services, error, created_at, updated_at, net_address, net_mac)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, backend = excluded.backend,
			engine_id = excluded.engine_id, state = excluded.state, parent_id = excluded.parent_id,
			checkpoint_id = excluded.checkpoint_id, generation = excluded.generation,
			token = excluded.token, options = excluded.options, services = excluded.services,
			error = excluded.error, created_at = excluded.created_at, updated_at = excluded.updated_at,
			net_address = excluded.net_address, net_mac = excluded.net_mac`,
		rec.ID, rec.Name, rec.Backend, rec.EngineID, string(rec.State), rec.ParentID, rec.CheckpointID,
		rec.Generation, rec.Token, string(opts), string(svcs), rec.Error, nanos(rec.CreatedAt), nanos(rec.UpdatedAt),
		netAddr, netMAC)
	if isConstraint(err) { // the id is the conflict target, so this is the name
		return fmt.Errorf("a sandbox named %q: %w", rec.Name, errdefs.ErrExists) // errdefs.Message: `… already exists`
	}
	if err != nil {
		return fmt.Errorf("storing sandbox %s: %w", rec.ID, err)
	}
	return nil
}

const sandboxCols = `id, name, backend, engine_id, state, parent_id, checkpoint_id, generation,
	token, options, services, error, created_at, updated_at, net_address, net_mac`

func scanSandbox(sc scanner) (sandbox.SandboxRecord, error) {
	var rec sandbox.SandboxRecord
	var state, opts, svcs, netAddr, netMAC string
	var created, updated int64
	if err := sc.Scan(&rec.ID, &rec.Name, &rec.Backend, &rec.EngineID, &state, &rec.ParentID,
		&rec.CheckpointID, &rec.Generation, &rec.Token, &opts, &svcs, &rec.Error, &created, &updated,
		&netAddr, &netMAC); err != nil {
		return rec, err
	}
	if netAddr != "" {
		rec.Net = &sandbox.NetIdentity{Address: netAddr, MAC: netMAC}
	}
	rec.State = sandbox.State(state)
	rec.CreatedAt, rec.UpdatedAt = fromNanos(created), fromNanos(updated)
	if err := json.Unmarshal([]byte(opts), &rec.Options); err != nil {
		return rec, fmt.Errorf("decoding options of %s: %w", rec.ID, err)
	}
	var services []guest.Service
	if err := json.Unmarshal([]byte(svcs), &services); err != nil {
		return rec, fmt.Errorf("decoding services of %s: %w", rec.ID, err)
	}
	rec.Services = services
	return rec, nil
}

// GetSandbox implements sandbox.Registry.
func (r *SandboxRegistry) GetSandbox(ctx context.Context, id string) (sandbox.SandboxRecord, error) {
	rec, err := scanSandbox(r.db.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.SandboxRecord{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return sandbox.SandboxRecord{}, fmt.Errorf("reading sandbox %s: %w", id, err)
	}
	return rec, nil
}

// ListSandboxes implements sandbox.Registry: oldest first, ties by id.
func (r *SandboxRegistry) ListSandboxes(ctx context.Context) ([]sandbox.SandboxRecord, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	defer rows.Close()
	out := []sandbox.SandboxRecord{}
	for rows.Next() {
		rec, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("listing sandboxes: %w", err)
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// DeleteSandbox implements sandbox.Registry.
func (r *SandboxRegistry) DeleteSandbox(ctx context.Context, id string) error {
	return deleteRow(ctx, r.db, `DELETE FROM sandboxes WHERE id = ?`, "sandbox", id)
}

func deleteRow(ctx context.Context, db *sql.DB, q, what, id string) error {
	res, err := db.ExecContext(ctx, q, id)
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", what, id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("%s %q: %w", what, id, errdefs.ErrNotFound)
	}
	return nil
}

// PutCheckpoint implements sandbox.Registry: an insert, never a replace.
func (r *SandboxRegistry) PutCheckpoint(ctx context.Context, rec sandbox.CheckpointRecord) error {
	opts, err := json.Marshal(rec.Options)
	if err != nil {
		return fmt.Errorf("encoding options of %s: %w", rec.ID, err)
	}
	sums := ""
	if len(rec.Checksums) > 0 {
		b, err := json.Marshal(rec.Checksums)
		if err != nil {
			return fmt.Errorf("encoding checksums of %s: %w", rec.ID, err)
		}
		sums = string(b)
	}
	origin := ""
	if rec.Origin != nil {
		b, err := json.Marshal(rec.Origin)
		if err != nil {
			return fmt.Errorf("encoding the origin of %s: %w", rec.ID, err)
		}
		origin = string(b)
	}
	_, err = r.db.ExecContext(ctx, `
		INSERT INTO checkpoints (id, tag, sandbox_id, parent_id, backend, dir, size_bytes, token,
			generation, hostname, options, created_at, checksums, origin)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		rec.ID, rec.Tag, rec.SandboxID, rec.ParentID, rec.Backend, rec.Dir, rec.SizeBytes, rec.Token,
		rec.Generation, rec.Hostname, string(opts), nanos(rec.CreatedAt), sums, origin)
	if isConstraint(err) {
		return fmt.Errorf("checkpoint %q: %w", rec.ID, errdefs.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("storing checkpoint %s: %w", rec.ID, err)
	}
	return nil
}

const checkpointCols = `id, tag, sandbox_id, parent_id, backend, dir, size_bytes, token, generation,
	hostname, options, created_at, checksums, origin`

func scanCheckpoint(sc scanner) (sandbox.CheckpointRecord, error) {
	var rec sandbox.CheckpointRecord
	var opts, sums, origin string
	var created int64
	if err := sc.Scan(&rec.ID, &rec.Tag, &rec.SandboxID, &rec.ParentID, &rec.Backend, &rec.Dir,
		&rec.SizeBytes, &rec.Token, &rec.Generation, &rec.Hostname, &opts, &created, &sums, &origin); err != nil {
		return rec, err
	}
	rec.CreatedAt = fromNanos(created)
	if err := json.Unmarshal([]byte(opts), &rec.Options); err != nil {
		return rec, fmt.Errorf("decoding options of %s: %w", rec.ID, err)
	}
	if sums != "" { // '': recorded before checksums existed
		if err := json.Unmarshal([]byte(sums), &rec.Checksums); err != nil {
			return rec, fmt.Errorf("decoding checksums of %s: %w", rec.ID, err)
		}
	}
	if origin != "" { // '': taken here, or recorded before imports were marked
		rec.Origin = &sandbox.CheckpointOrigin{}
		if err := json.Unmarshal([]byte(origin), rec.Origin); err != nil {
			return rec, fmt.Errorf("decoding the origin of %s: %w", rec.ID, err)
		}
	}
	return rec, nil
}

// GetCheckpoint implements sandbox.Registry.
func (r *SandboxRegistry) GetCheckpoint(ctx context.Context, id string) (sandbox.CheckpointRecord, error) {
	rec, err := scanCheckpoint(r.db.QueryRowContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.CheckpointRecord{}, fmt.Errorf("checkpoint %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return sandbox.CheckpointRecord{}, fmt.Errorf("reading checkpoint %s: %w", id, err)
	}
	return rec, nil
}

// ListCheckpoints implements sandbox.Registry: oldest first, ties by id.
func (r *SandboxRegistry) ListCheckpoints(ctx context.Context) ([]sandbox.CheckpointRecord, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing checkpoints: %w", err)
	}
	defer rows.Close()
	out := []sandbox.CheckpointRecord{}
	for rows.Next() {
		rec, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("listing checkpoints: %w", err)
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// DeleteCheckpoint implements sandbox.Registry.
func (r *SandboxRegistry) DeleteCheckpoint(ctx context.Context, id string) error {
	return deleteRow(ctx, r.db, `DELETE FROM checkpoints WHERE id = ?`, "checkpoint", id)
}
