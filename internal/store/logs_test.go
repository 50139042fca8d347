package store_test

import (
	"context"
	"os"
	"path/filepath"
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
