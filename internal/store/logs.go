package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// LogLine is one line a function printed. RequestID is empty for lines the
// zygote printed at import or warm-up, and for Zygo's own warm-up reports
// (Stream "zygo").
type LogLine struct {
	ID        int64     `json:"id"`
	Function  string    `json:"function"`
	Version   string    `json:"version"`
	RequestID string    `json:"request_id,omitempty"`
	Stream    string    `json:"stream"` // "stdout", "stderr" or "zygo"
	At        time.Time `json:"at"`
	Line      string    `json:"line"`
}

// MaxLogLinesPerFunction bounds the logs kept per function; older lines are
// pruned as new ones arrive.
const MaxLogLinesPerFunction = 20_000

// AppendLogs stores lines in one transaction and, in it, prunes each
// function's logs to the newest MaxLogLinesPerFunction. Of more lines of one
// function than that, only the newest are inserted: one call never writes
// more rows than the retention keeps.
func (s *Store) AppendLogs(ctx context.Context, lines []LogLine) error {
	lines = newestPerFunction(lines, MaxLogLinesPerFunction)
	if len(lines) == 0 {
		return nil
	}
	insert, prune, err := s.logs.get(ctx, s.db)
	if err != nil {
		return fmt.Errorf("appending logs: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("appending logs: %w", err)
	}
	defer tx.Rollback()
	stmt := tx.StmtContext(ctx, insert)
	defer stmt.Close()
	pruneTx := tx.StmtContext(ctx, prune)
	defer pruneTx.Close()
	fns := map[string]bool{}
	for _, l := range lines {
		if _, err := stmt.ExecContext(ctx, l.Function, l.Version, l.RequestID, l.Stream, l.At.UnixMilli(), l.Line); err != nil {
			return fmt.Errorf("appending logs: %w", err)
		}
		fns[l.Function] = true
	}
	for fn := range fns {
		if _, err := pruneTx.ExecContext(ctx, fn, fn, MaxLogLinesPerFunction); err != nil {
			return fmt.Errorf("pruning logs: %w", err)
		}
	}
	return tx.Commit()
}

// logStatements are AppendLogs' statements, prepared once per Store rather than parsed
// again for every batch (the parse was over a third of a batch's CPU: issue 15's daemon
// profile). database/sql keeps each prepared on the connections it has been used on.
type logStatements struct {
	mu            sync.Mutex // guards the fields below
	insert, prune *sql.Stmt  // nil until first used
}

const (
	insertLogSQL = `INSERT INTO logs (function, version, request_id, stream, at, line) VALUES (?, ?, ?, ?, ?, ?)`
	pruneLogsSQL = `DELETE FROM logs WHERE function = ? AND id <= (
			SELECT id FROM logs WHERE function = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`
)

// get returns the prepared insert and prune statements, preparing them on db the first
// time (a failure is returned and tried again next time).
func (l *logStatements) get(ctx context.Context, db *sql.DB) (insert, prune *sql.Stmt, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.insert == nil {
		// Not bound to the caller's context: the statements outlive this call.
		ins, err := db.PrepareContext(context.WithoutCancel(ctx), insertLogSQL)
		if err != nil {
			return nil, nil, fmt.Errorf("preparing the log insert: %w", err)
		}
		pr, err := db.PrepareContext(context.WithoutCancel(ctx), pruneLogsSQL)
		if err != nil {
			ins.Close()
			return nil, nil, fmt.Errorf("preparing the log prune: %w", err)
		}
		l.insert, l.prune = ins, pr
	}
	return l.insert, l.prune, nil
}

// close closes the statements (Store.Close).
func (l *logStatements) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, st := range []*sql.Stmt{l.insert, l.prune} {
		if st != nil {
			_ = st.Close()
		}
	}
	l.insert, l.prune = nil, nil
}

// newestPerFunction returns lines without the oldest of any function that
// has more than keep, in order; lines itself when none has.
func newestPerFunction(lines []LogLine, keep int) []LogLine {
	count := map[string]int{}
	over := false
	for _, l := range lines {
		count[l.Function]++
		over = over || count[l.Function] > keep
	}
	if !over {
		return lines
	}
	out := make([]LogLine, 0, len(lines))
	for _, l := range lines {
		if count[l.Function] > keep {
			count[l.Function]--
			continue
		}
		out = append(out, l)
	}
	return out
}

// LogQuery selects log lines.
type LogQuery struct {
	Function  string
	RequestID string // optional
	AfterID   int64  // only lines with ID > AfterID
	Limit     int    // at most this many, oldest first; 0 means 1000
}

// Logs returns the lines matching q, oldest first.
func (s *Store) Logs(ctx context.Context, q LogQuery) ([]LogLine, error) {
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	query := `SELECT id, function, version, request_id, stream, at, line FROM logs WHERE function = ? AND id > ?`
	args := []any{q.Function, q.AfterID}
	if q.RequestID != "" {
		query += ` AND request_id = ?`
		args = append(args, q.RequestID)
	}
	query += ` ORDER BY id LIMIT ?`
	args = append(args, q.Limit)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reading logs: %w", err)
	}
	defer rows.Close()
	var out []LogLine
	for rows.Next() {
		var l LogLine
		var at int64
		if err := rows.Scan(&l.ID, &l.Function, &l.Version, &l.RequestID, &l.Stream, &at, &l.Line); err != nil {
			return nil, err
		}
		l.At = time.UnixMilli(at)
		out = append(out, l)
	}
	return out, rows.Err()
}
