package function

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// TestLogWriterNeverWaitsForTheStore: while the store is stuck, append
// returns at once however much is appended, the queue stays bounded, and
// once the store is back the dropped lines are counted in a note.
func TestLogWriterNeverWaitsForTheStore(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var stored []store.LogLine
	var biggest int
	w := newLogWriter(func(_ context.Context, lines []store.LogLine) error {
		<-release
		mu.Lock()
		defer mu.Unlock()
		stored = append(stored, lines...)
		biggest = max(biggest, len(lines))
		return nil
	}, slog.Default())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ { // 200,000 lines, ten times the queue
			batch := make([]store.LogLine, 2000)
			for j := range batch {
				batch[j] = store.LogLine{Function: "flood", Version: "v1", Line: "x"}
			}
			w.append(batch)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang, not a timing threshold
		close(release)
		t.Fatal("append waited for a stuck store")
	}
	w.mu.Lock()
	pending := len(w.pending)
	w.mu.Unlock()
	if pending > maxPendingLines {
		t.Fatalf("%d lines pending, bound %d", pending, maxPendingLines)
	}
	close(release)
	w.Flush(context.Background())
	w.close()
	mu.Lock()
	defer mu.Unlock()
	if biggest > store.DefaultLogRetentionLines+1 {
		t.Errorf("a batch of %d lines: more than the retention", biggest)
	}
	var note string
	for _, l := range stored {
		if l.Stream == "zygo" && l.Function == "flood" && l.Version == "v1" {
			note = l.Line
		}
	}
	if len(stored) > 200_000-150_000 || !strings.Contains(note, "dropped") {
		t.Fatalf("%d lines stored, note %q: want the queue's worth and a note of the rest", len(stored), note)
	}
}
