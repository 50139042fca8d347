package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"
)

// LogLine is one line a function printed. RequestID is empty for lines the
// zygote printed at import or warm-up, and for Zygo's own warm-up reports
// (Stream "zygo"). CallerID is the id the caller gave the request
// (X-Request-Id, or the trace id of its traceparent), on the lines the daemon
// wrote for it; empty otherwise.
type LogLine struct {
	ID        int64     `json:"id"`
	Function  string    `json:"function"`
	Version   string    `json:"version"`
	RequestID string    `json:"request_id,omitempty"`
	CallerID  string    `json:"caller_id,omitempty"`
	Stream    string    `json:"stream"` // "stdout", "stderr" or "zygo"
	At        time.Time `json:"at"`
	Line      string    `json:"line"`
}

// DefaultLogRetentionLines is how many lines each function keeps unless
// SetLogRetention says otherwise (zygo serve --log-retention-lines); older
// lines are pruned as new ones arrive.
const DefaultLogRetentionLines = 20_000

// MaxLogRetentionLines is the largest retention SetLogRetention takes: a line
// is at most 16 KiB, so a function's logs stay within about 160 GiB even of
// the longest lines.
const MaxLogRetentionLines = 10_000_000

// SetLogRetention makes each function keep its newest lines lines (1..MaxLogRetentionLines;
// the daemon validates its flag), from the next AppendLogs on. Safe for concurrent use.
func (s *Store) SetLogRetention(lines int) { s.logRetention.Store(int64(lines)) }

// LogRetention returns how many lines each function keeps.
func (s *Store) LogRetention() int {
	if n := s.logRetention.Load(); n > 0 {
		return int(n)
	}
	return DefaultLogRetentionLines
}

// AppendLogs stores lines in one transaction and, in it, prunes each
// function's logs to the newest LogRetention. Of more lines of one function
// than that, only the newest are inserted: one call never writes more rows
// than the retention keeps.
//
// The prune costs what it removes, not what the retention keeps: each
// function's row count is counted once (the first append to it since the
// store was opened) and then kept up to date (logCounts), and only when it
// passes the retention are the oldest rows over it deleted, found from the
// oldest end of the function's index. (It used to find the newest
// retention's-worth of rows from the newest end on every batch: a walk of up
// to 20,000 index entries per warm request, most of a batch's CPU.)
func (s *Store) AppendLogs(ctx context.Context, lines []LogLine) error {
	keep := s.LogRetention()
	lines = newestPerFunction(lines, keep)
	if len(lines) == 0 {
		return nil
	}
	insert, prune, err := s.logs.get(ctx, s.db)
	if err != nil {
		return fmt.Errorf("appending logs: %w", err)
	}
	s.logCounts.mu.Lock()
	defer s.logCounts.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("appending logs: %w", err)
	}
	defer tx.Rollback()
	stmt := tx.StmtContext(ctx, insert)
	defer stmt.Close()
	pruneTx := tx.StmtContext(ctx, prune)
	defer pruneTx.Close()
	added := map[string]int64{}
	for _, l := range lines {
		if _, err := stmt.ExecContext(ctx, l.Function, l.Version, l.RequestID, l.CallerID, l.Stream, l.At.UnixMilli(), l.Line); err != nil {
			return fmt.Errorf("appending logs: %w", err)
		}
		added[l.Function]++
	}
	counts := make(map[string]int64, len(added))
	for fn, n := range added {
		have, ok := s.logCounts.n[fn]
		if ok {
			have += n
		} else if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM logs WHERE function = ?`, fn).Scan(&have); err != nil {
			return fmt.Errorf("counting logs: %w", err)
		}
		if over := have - int64(keep); over > 0 {
			if _, err := pruneTx.ExecContext(ctx, fn, fn, over-1); err != nil {
				return fmt.Errorf("pruning logs: %w", err)
			}
			have = int64(keep)
		}
		counts[fn] = have
	}
	if err := tx.Commit(); err != nil {
		for fn := range counts {
			delete(s.logCounts.n, fn) // counted again next time
		}
		return fmt.Errorf("appending logs: %w", err)
	}
	if s.logCounts.n == nil {
		s.logCounts.n = map[string]int64{}
	}
	for fn, n := range counts {
		s.logCounts.n[fn] = n
	}
	return nil
}

// logCounts are the functions' log row counts as AppendLogs keeps them.
// Everything that changes the logs table takes mu around its transaction and
// updates or forgets the counts of the functions it changed (AppendLogs,
// DeleteFunction).
type logCounts struct {
	mu sync.Mutex
	n  map[string]int64 // function → rows; missing: not counted yet
}

// forget drops fn's count after its rows were deleted (call with mu held).
func (c *logCounts) forget(fn string) { delete(c.n, fn) }

// logStatements are AppendLogs' statements, prepared once per Store rather than parsed
// again for every batch (the parse was over a third of a batch's CPU: issue 15's daemon
// profile). database/sql keeps each prepared on the connections it has been used on.
type logStatements struct {
	mu            sync.Mutex // guards the fields below
	insert, prune *sql.Stmt  // nil until first used
}

const (
	insertLogSQL = `INSERT INTO logs (function, version, request_id, caller_id, stream, at, line) VALUES (?, ?, ?, ?, ?, ?, ?)`
	// pruneLogsSQL deletes the oldest N+1 rows of a function (N is its third argument).
	pruneLogsSQL = `DELETE FROM logs WHERE function = ? AND id <= (
			SELECT id FROM logs WHERE function = ? ORDER BY id ASC LIMIT 1 OFFSET ?)`
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
	Function string
	// RequestID, when set, selects one request's lines: those of the request with this id,
	// or of the requests whose caller gave this id (LogLine.CallerID).
	RequestID string
	AfterID   int64     // only lines with ID > AfterID
	Since     time.Time // when set, only lines stored at or after it (millisecond precision)
	Limit     int       // at most this many, oldest first; 0 means 1000
}

// where returns the WHERE clause of q (without the id bound) and its arguments.
func (q LogQuery) where() (string, []any) {
	var b strings.Builder
	b.WriteString(`function = ?`)
	args := []any{q.Function}
	if q.RequestID != "" {
		b.WriteString(` AND (request_id = ? OR request_id IN (SELECT request_id FROM logs
			WHERE function = ? AND caller_id = ? AND caller_id != '' AND request_id != ''))`)
		args = append(args, q.RequestID, q.Function, q.RequestID)
	}
	if !q.Since.IsZero() {
		b.WriteString(` AND at >= ?`)
		args = append(args, q.Since.UnixMilli())
	}
	return b.String(), args
}

// Logs returns the lines matching q, oldest first.
func (s *Store) Logs(ctx context.Context, q LogQuery) ([]LogLine, error) {
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	where, args := q.where()
	return s.logRows(ctx, `SELECT id, function, version, request_id, caller_id, stream, at, line FROM logs
		WHERE `+where+` AND id > ? ORDER BY id LIMIT ?`, append(args, q.AfterID, q.Limit)...)
}

// TailLogs returns the newest n lines matching q (q.AfterID and q.Limit are ignored), oldest
// first, and the id of the function's newest line when it ran (0 when it has none): passed as
// AfterID of the next Logs, it continues right after what TailLogs saw. n may be 0 (only the
// position of the end).
func (s *Store) TailLogs(ctx context.Context, q LogQuery, n int) ([]LogLine, int64, error) {
	tx, err := s.db.BeginTx(ctx, nil) // one snapshot: the end and the lines agree
	if err != nil {
		return nil, 0, fmt.Errorf("reading logs: %w", err)
	}
	defer tx.Rollback()
	var end int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM logs WHERE function = ?`, q.Function).Scan(&end); err != nil {
		return nil, 0, fmt.Errorf("reading logs: %w", err)
	}
	if n <= 0 {
		return nil, end, nil
	}
	where, args := q.where()
	lines, err := scanLogs(tx.QueryContext(ctx, `SELECT id, function, version, request_id, caller_id, stream, at, line FROM logs
		WHERE `+where+` AND id <= ? ORDER BY id DESC LIMIT ?`, append(args, end, n)...))
	if err != nil {
		return nil, 0, err
	}
	for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
		lines[i], lines[j] = lines[j], lines[i]
	}
	return lines, end, nil
}

func (s *Store) logRows(ctx context.Context, query string, args ...any) ([]LogLine, error) {
	return scanLogs(s.db.QueryContext(ctx, query, args...))
}

// scanLogs reads the log lines of a query's rows (err: the query's), closing them.
func scanLogs(rows *sql.Rows, err error) ([]LogLine, error) {
	if err != nil {
		return nil, fmt.Errorf("reading logs: %w", err)
	}
	defer rows.Close()
	var out []LogLine
	for rows.Next() {
		var l LogLine
		var at int64
		if err := rows.Scan(&l.ID, &l.Function, &l.Version, &l.RequestID, &l.CallerID, &l.Stream, &at, &l.Line); err != nil {
			return nil, fmt.Errorf("reading logs: %w", err)
		}
		l.At = time.UnixMilli(at)
		out = append(out, l)
	}
	return out, rows.Err()
}
