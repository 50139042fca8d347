package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/store"
)

// BenchmarkAppendLogs is the daemon's log batch of one warm request (a status line and two
// lines of output) as the log writer stores it: the statements' cost per batch, not the
// disk's, is what it measures (docs/BENCHMARKS.md, issue 15).
func BenchmarkAppendLogs(b *testing.B) {
	s, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "zygo.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("r-%d", i)
		lines := []store.LogLine{
			{Function: "hello", Version: "v1", RequestID: id, Stream: "stdout", At: now, Line: "hello"},
			{Function: "hello", Version: "v1", RequestID: id, Stream: "stderr", At: now, Line: "warn"},
			{Function: "hello", Version: "v1", RequestID: id, Stream: "zygo", At: now, Line: "request " + id + " done in 1.0 ms"},
		}
		if err := s.AppendLogs(context.Background(), lines); err != nil {
			b.Fatal(err)
		}
	}
}
