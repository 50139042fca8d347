package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/store"
)

// TestAppendLogsInsertsNoMoreThanTheRetention: a batch with more lines of
// one function than the retention keeps inserts only its newest (the row
// ids show how many were inserted), and the other function keeps its own.
func TestAppendLogsInsertsNoMoreThanTheRetention(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	const n = store.DefaultLogRetentionLines + 5000
	lines := append(logLines("flood", "v", "r1", n, time.Now()), logLines("quiet", "v", "r2", 3, time.Now())...)
	if err := st.AppendLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	var maxID, rows int64
	if err := st.DB().QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0), COUNT(*) FROM logs`).Scan(&maxID, &rows); err != nil {
		t.Fatal(err)
	}
	if want := int64(store.DefaultLogRetentionLines + 3); maxID != want || rows != want {
		t.Fatalf("max id %d, %d rows: want %d inserted (the retention of flood, and quiet's 3)", maxID, rows, want)
	}
	got, err := st.Logs(ctx, store.LogQuery{Function: "flood", Limit: 1})
	if err != nil || len(got) != 1 || got[0].Line != "flood r1 line 5000" {
		t.Fatalf("oldest kept line of flood: %+v %v", got, err)
	}
	if got, _ := st.Logs(ctx, store.LogQuery{Function: "quiet"}); len(got) != 3 {
		t.Fatalf("quiet kept %d lines", len(got))
	}
}

// TestWALGivesDiskBack: after a burst of log writes the WAL file does not
// keep the burst's size once later writes have checkpointed it.
func TestWALGivesDiskBack(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zygo.db")
	st := openStore(t, path)
	big := logLines("f", "v", "r", store.DefaultLogRetentionLines, time.Now())
	for i := range big {
		big[i].Line = strings.Repeat("x", 1000)
	}
	if err := st.AppendLogs(ctx, big); err != nil { // about 20 MB in one transaction
		t.Fatal(err)
	}
	for range 50 {
		if err := st.AppendLogs(ctx, logLines("f", "v", "r", 100, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 8<<20 {
		t.Fatalf("zygo.db-wal is %d bytes after the burst was checkpointed: its disk is not given back", fi.Size())
	}
}

// SetLogRetention changes how many lines each function keeps from the next append on.
func TestLogRetentionSetting(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	if st.LogRetention() != store.DefaultLogRetentionLines {
		t.Fatalf("default retention %d", st.LogRetention())
	}
	st.SetLogRetention(10)
	if err := st.AppendLogs(ctx, logLines("f", "v", "r", 25, time.Now())); err != nil {
		t.Fatal(err)
	}
	got, err := st.Logs(ctx, store.LogQuery{Function: "f"})
	if err != nil || len(got) != 10 || got[0].Line != "f r line 15" {
		t.Fatalf("kept %d lines (first %+v), %v; want the newest 10", len(got), got, err)
	}
}

// Since selects lines by time; TailLogs answers the newest n lines matching, oldest first,
// and the end of the function's lines, also for n = 0 and past lines of other requests.
func TestLogsSinceAndTail(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	t0 := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	lines := append(logLines("f", "v", "r1", 5, t0), logLines("f", "v", "r2", 5, t0.Add(time.Minute))...)
	lines = append(lines, logLines("other", "v", "r3", 3, t0)...)
	if err := st.AppendLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	got, err := st.Logs(ctx, store.LogQuery{Function: "f", Since: t0.Add(time.Minute + 2*time.Millisecond)})
	if err != nil || len(got) != 3 || got[0].Line != "f r2 line 2" {
		t.Fatalf("since: %+v %v", got, err)
	}
	got, end, err := st.TailLogs(ctx, store.LogQuery{Function: "f"}, 3)
	if err != nil || len(got) != 3 || got[0].Line != "f r2 line 2" || got[2].Line != "f r2 line 4" || end != 10 {
		t.Fatalf("tail 3: %+v end %d %v", got, end, err)
	}
	got, end, err = st.TailLogs(ctx, store.LogQuery{Function: "f", RequestID: "r1"}, 2)
	if err != nil || len(got) != 2 || got[1].Line != "f r1 line 4" || end != 10 {
		t.Fatalf("tail 2 of r1: %+v end %d %v", got, end, err)
	}
	if got, end, err = st.TailLogs(ctx, store.LogQuery{Function: "f"}, 0); err != nil || len(got) != 0 || end != 10 {
		t.Fatalf("tail 0: %+v end %d %v", got, end, err)
	}
	if _, end, err = st.TailLogs(ctx, store.LogQuery{Function: "none"}, 5); err != nil || end != 0 {
		t.Fatalf("tail of a function without lines: end %d %v", end, err)
	}
}

// A request is found by the caller's id its Zygo lines carry: all its lines, including
// those written without it (a Node worker's own output), and no other request's.
func TestLogsByCallerID(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	now := time.Now()
	lines := logLines("f", "v", "r1", 2, now) // the worker's output: no caller id
	lines = append(lines, store.LogLine{Function: "f", Version: "v", RequestID: "r1", CallerID: "trace-abc", Stream: "zygo", At: now, Line: "request r1 done"})
	lines = append(lines, logLines("f", "v", "r2", 2, now)...)
	lines = append(lines, store.LogLine{Function: "g", Version: "v", RequestID: "r9", CallerID: "trace-abc", Stream: "zygo", At: now, Line: "other function"})
	if err := st.AppendLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	got, err := st.Logs(ctx, store.LogQuery{Function: "f", RequestID: "trace-abc"})
	if err != nil || len(got) != 3 || got[2].CallerID != "trace-abc" || got[0].RequestID != "r1" {
		t.Fatalf("by caller id: %+v %v", got, err)
	}
	if got, _ := st.Logs(ctx, store.LogQuery{Function: "f", RequestID: "r1"}); len(got) != 3 {
		t.Fatalf("by request id: %+v", got)
	}
}

// TestRetentionHeldOverManyBatches: the prune counts each function's rows once and then
// keeps the count, so it must stay exact over many small batches, a retention lowered
// between them, a store reopened (counted again), and a function whose logs were deleted
// (DeleteFunction) and that logs again: every function keeps exactly its newest lines.
func TestRetentionHeldOverManyBatches(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "zygo.db")
	st := openStore(t, path)
	st.SetLogRetention(50)
	for i := range 40 {
		lines := append(logLines("a", "v", "r", 3, time.Now()), logLines("b", "v", "r", 1, time.Now())...)
		lines[0].Line = "a batch " + strconv.Itoa(i)
		if err := st.AppendLogs(ctx, lines); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := rowCount(t, st, "logs", "a"), rowCount(t, st, "logs", "b"); a != 50 || b != 40 {
		t.Fatalf("a keeps %d lines, b %d: want 50 and 40", a, b)
	}
	st.SetLogRetention(20)
	if err := st.AppendLogs(ctx, logLines("a", "v", "r", 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	if a := rowCount(t, st, "logs", "a"); a != 20 {
		t.Fatalf("after the retention fell to 20, a keeps %d lines", a)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openStore(t, path)
	st.SetLogRetention(20)
	for range 3 {
		if err := st.AppendLogs(ctx, logLines("b", "v", "r", 5, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if b := rowCount(t, st, "logs", "b"); b != 20 {
		t.Fatalf("reopened, b keeps %d lines, want 20", b)
	}
	putActive(t, st, "a", "sha256:1", "m1")
	if err := st.DeleteFunction(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendLogs(ctx, logLines("a", "v", "r", 4, time.Now())); err != nil {
		t.Fatal(err)
	}
	if a := rowCount(t, st, "logs", "a"); a != 4 {
		t.Fatalf("a logged 4 lines after it was deleted and keeps %d", a)
	}
	got, err := st.Logs(ctx, store.LogQuery{Function: "b", Limit: 1})
	if err != nil || len(got) != 1 || got[0].Line != "b r line 0" {
		t.Fatalf("b's oldest kept line: %+v, %v; want the first of the last 4 batches of 5", got, err)
	}
}
