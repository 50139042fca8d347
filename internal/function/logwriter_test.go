package function

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/store"
)

// slowStore records the lines it is given, slowly, in order.
type slowStore struct {
	mu    sync.Mutex
	lines []string
	calls int
}

func (s *slowStore) append(_ context.Context, lines []store.LogLine) error {
	time.Sleep(2 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	for _, l := range lines {
		s.lines = append(s.lines, l.Line)
	}
	return nil
}

func (s *slowStore) snapshot() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...), s.calls
}

func TestLogWriterFlushIsReadYourWrites(t *testing.T) {
	st := &slowStore{}
	w := newLogWriter(st.append, slog.Default())
	for i := 0; i < 200; i++ {
		w.append([]store.LogLine{{Line: fmt.Sprint(i)}})
	}
	w.Flush(context.Background())
	got, calls := st.snapshot()
	if len(got) != 200 {
		t.Fatalf("after Flush, %d of 200 lines stored", len(got))
	}
	for i, l := range got {
		if l != fmt.Sprint(i) {
			t.Fatalf("line %d is %q: order lost", i, l)
		}
	}
	if calls >= 200 {
		t.Errorf("%d store calls for 200 lines: no batching", calls)
	}
	w.append([]store.LogLine{{Line: "last"}})
	w.close()
	if got, _ := st.snapshot(); got[len(got)-1] != "last" {
		t.Fatalf("close did not store the queued line: %v", got[len(got)-3:])
	}
	// After close, lines are written through.
	w.append([]store.LogLine{{Line: "after close"}})
	if got, _ := st.snapshot(); got[len(got)-1] != "after close" {
		t.Fatal("a line appended after close was lost")
	}
}
