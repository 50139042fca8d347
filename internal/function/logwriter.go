package function

import (
	"context"
	"log/slog"
	"sync"

	"github.com/zygo-run/zygo/internal/store"
)

// logWriter stores log lines off the request path: lines are queued and a
// single goroutine writes them in batches, one transaction each. Flush
// waits until everything queued before it is stored, so a caller that asks
// for logs after its request returned (read-your-writes) sees them.
type logWriter struct {
	store func(ctx context.Context, lines []store.LogLine) error
	log   *slog.Logger

	mu      sync.Mutex // guards pending, waiters and closed
	pending []store.LogLine
	waiters []chan struct{}
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// maxPendingLines bounds the queue; beyond it, append writes through (the
// caller waits) so memory stays bounded under a flood of output.
const maxPendingLines = 50_000

func newLogWriter(storeFn func(ctx context.Context, lines []store.LogLine) error, log *slog.Logger) *logWriter {
	w := &logWriter{store: storeFn, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// append queues lines (or writes them at once when the queue is full or
// the writer is closed).
func (w *logWriter) append(lines []store.LogLine) {
	if len(lines) == 0 {
		return
	}
	w.mu.Lock()
	if w.closed || len(w.pending) > maxPendingLines {
		w.mu.Unlock()
		w.write(lines)
		return
	}
	w.pending = append(w.pending, lines...)
	w.mu.Unlock()
	w.kick()
}

func (w *logWriter) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Flush returns once every line queued before the call is stored, or ctx
// ends.
func (w *logWriter) Flush(ctx context.Context) {
	ch := make(chan struct{})
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.waiters = append(w.waiters, ch)
	w.mu.Unlock()
	w.kick()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (w *logWriter) run() {
	defer close(w.done)
	for range w.wake {
		for {
			w.mu.Lock()
			batch, waiters := w.pending, w.waiters
			w.pending, w.waiters = nil, nil
			w.mu.Unlock()
			if len(batch) == 0 && len(waiters) == 0 {
				break
			}
			w.write(batch)
			for _, ch := range waiters {
				close(ch)
			}
		}
	}
}

func (w *logWriter) write(lines []store.LogLine) {
	if len(lines) == 0 {
		return
	}
	if err := w.store(context.Background(), lines); err != nil {
		w.log.Error("storing logs", "err", err, "lines", len(lines))
	}
}

// close stores what is queued and stops the writer.
func (w *logWriter) close() {
	w.Flush(context.Background())
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	close(w.wake)
	<-w.done
}
