package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// Host ids: each function (owner "function:NAME") and each sandbox (owner
// "sandbox:ID") runs as a host uid, with the gid of the same number, that
// no other owner shares. The daemon owns a range of ids (internal/hostid);
// this table records which id of it each owner holds, so that an owner keeps
// its id across restarts and the files made for it stay its own.
//
// An id, once handed out, keeps its row for ever: a released row has no
// owner and the time it was released. New owners get the lowest id never
// handed out; only when the whole range has been handed out once is a
// released id reused, the longest released first, and only one that the
// caller's inUse check clears (no process of the host runs as it).
const hostIDSchema = `
CREATE TABLE IF NOT EXISTS host_ids (
	id          INTEGER PRIMARY KEY,
	owner       TEXT UNIQUE,
	released_at INTEGER
);
`

// IDRange is a block of host ids: First, First+1, ..., First+Count-1.
type IDRange struct {
	First, Count uint32
}

// Contains reports whether id is in r.
func (r IDRange) Contains(id uint32) bool {
	return id >= r.First && uint64(id) < uint64(r.First)+uint64(r.Count)
}

// last returns r's highest id; r.Count must be > 0.
func (r IDRange) last() uint32 { return uint32(uint64(r.First) + uint64(r.Count) - 1) }

// AcquireHostID returns the host id owner holds in r, handing it a new one
// first when it holds none (or holds one outside r, which is released). inUse
// is asked before a released id is handed out again and must report true
// while anything may still run as it. Errors: errdefs.ErrUnavailable when
// every id of r is held or in use, or the database's error.
func (s *Store) AcquireHostID(ctx context.Context, owner string, r IDRange, inUse func(id uint32) bool) (uint32, error) {
	if r.Count == 0 {
		return 0, fmt.Errorf("%w: empty host id range", errdefs.ErrInvalidArgument)
	}
	s.idMu.Lock()
	defer s.idMu.Unlock()
	var held int64
	err := s.db.QueryRowContext(ctx, `SELECT id FROM host_ids WHERE owner = ?`, owner).Scan(&held)
	switch {
	case err == nil && r.Contains(uint32(held)):
		return uint32(held), nil
	case err == nil: // the range changed since: the old id goes back
		if err := s.releaseHostIDLocked(ctx, owner); err != nil {
			return 0, err
		}
	case !errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("looking up the host id of %s: %w", owner, err)
	}
	id, err := s.freeHostIDLocked(ctx, r, inUse)
	if err != nil {
		return 0, err
	}
	if _, err := s.db.ExecContext(ctx,
		`INSERT INTO host_ids (id, owner, released_at) VALUES (?, ?, NULL)
		 ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, released_at = NULL`, id, owner); err != nil {
		return 0, fmt.Errorf("recording host id %d for %s: %w", id, owner, err)
	}
	return id, nil
}

// freeHostIDLocked picks the id AcquireHostID hands out next (see the table's
// comment).
func (s *Store) freeHostIDLocked(ctx context.Context, r IDRange, inUse func(uint32) bool) (uint32, error) {
	var maxID sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(id) FROM host_ids WHERE id BETWEEN ? AND ?`,
		r.First, r.last()).Scan(&maxID); err != nil {
		return 0, fmt.Errorf("choosing a host id: %w", err)
	}
	if !maxID.Valid {
		return r.First, nil
	}
	if uint32(maxID.Int64) < r.last() {
		return uint32(maxID.Int64) + 1, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM host_ids WHERE owner IS NULL AND id BETWEEN ? AND ?
		ORDER BY released_at, id`, r.First, r.last())
	if err != nil {
		return 0, fmt.Errorf("choosing a host id: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return 0, fmt.Errorf("choosing a host id: %w", err)
		}
		if inUse == nil || !inUse(uint32(id)) {
			return uint32(id), nil
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("choosing a host id: %w", err)
	}
	return 0, fmt.Errorf("%w: every host id of %d-%d is taken (widen --uid-range)", errdefs.ErrUnavailable, r.First, r.last())
}

// ReleaseHostID gives back the id owner holds, if any; the caller has removed
// every file and stopped every process of it. Releasing twice is a no-op.
func (s *Store) ReleaseHostID(ctx context.Context, owner string) error {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	return s.releaseHostIDLocked(ctx, owner)
}

func (s *Store) releaseHostIDLocked(ctx context.Context, owner string) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE host_ids SET owner = NULL, released_at = ? WHERE owner = ?`,
		time.Now().UnixMilli(), owner); err != nil {
		return fmt.Errorf("releasing the host id of %s: %w", owner, err)
	}
	return nil
}

// HeldHostIDs reports, for the daemon's own check of a range at start,
// whether id is held by an owner (handed out and not released). Errors are
// the database's.
func (s *Store) HeldHostIDs(ctx context.Context) (map[uint32]bool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM host_ids WHERE owner IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("listing held host ids: %w", err)
	}
	defer rows.Close()
	held := map[uint32]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("listing held host ids: %w", err)
		}
		held[uint32(id)] = true
	}
	return held, rows.Err()
}

// The range an automatic (--uid-range auto) daemon chose last, kept so that
// a restart takes the same block and its functions keep their ids.
const hostRangeSchema = `
CREATE TABLE IF NOT EXISTS host_range (
	one   INTEGER PRIMARY KEY CHECK (one = 1),
	first INTEGER NOT NULL,
	count INTEGER NOT NULL
);
`

// HostRange returns the range recorded by SetHostRange, or the zero IDRange
// when none is. Errors are the database's.
func (s *Store) HostRange(ctx context.Context) (IDRange, error) {
	var r IDRange
	err := s.db.QueryRowContext(ctx, `SELECT first, count FROM host_range WHERE one = 1`).Scan(&r.First, &r.Count)
	if errors.Is(err, sql.ErrNoRows) {
		return IDRange{}, nil
	}
	if err != nil {
		return IDRange{}, fmt.Errorf("reading the host id range: %w", err)
	}
	return r, nil
}

// SetHostRange records r as the daemon's range.
func (s *Store) SetHostRange(ctx context.Context, r IDRange) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO host_range (one, first, count) VALUES (1, ?, ?)
		ON CONFLICT (one) DO UPDATE SET first = excluded.first, count = excluded.count`, r.First, r.Count); err != nil {
		return fmt.Errorf("recording the host id range: %w", err)
	}
	return nil
}
