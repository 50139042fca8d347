package function

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/zygo-run/zygo/internal/store"
)

// logWriter stores log lines off the request path: lines are queued and a
// single goroutine writes them in batches, one transaction each. A batch
// gathers for up to batchWindow after its first line, so the lines of the
// requests that end close together are stored in one transaction (a
// transaction's fixed cost was most of the daemon's log CPU per request).
// Flush waits until everything queued before it is stored, without the
// window, so a caller that asks for logs after its request returned
// (read-your-writes) sees them at once.
//
// The queue is bounded (maxPendingLines lines, maxPendingBytes bytes of
// text): when the store falls behind, further lines are dropped and counted
// per function, and the next batch stores one "[zygo: N log lines ...
// dropped]" line for each. append never waits for the store, so a flood of
// output costs a request neither time nor the daemon memory; a batch is
// never larger than the store's retention of one function.
type logWriter struct {
	store func(ctx context.Context, lines []store.LogLine) error
	log   *slog.Logger

	mu           sync.Mutex // guards the fields below
	pending      []store.LogLine
	pendingBytes int
	dropped      map[string]*droppedLogs // function → what was dropped since the last batch
	waiters      []chan struct{}
	closed       bool
	wake         chan struct{}
	now          chan struct{} // ends a batch's gathering early: a Flush, or a full batch
	done         chan struct{}
}

// droppedLogs counts the lines of one function dropped from a full queue.
type droppedLogs struct {
	version      string
	lines, bytes int64
}

// The queue's bounds.
const (
	maxPendingLines = store.DefaultLogRetentionLines
	maxPendingBytes = 16 << 20
)

// A batch's gathering: at most batchWindow after its first line, or until it
// holds batchLines lines.
const (
	batchWindow = 50 * time.Millisecond
	batchLines  = 1024
)

func newLogWriter(storeFn func(ctx context.Context, lines []store.LogLine) error, log *slog.Logger) *logWriter {
	w := &logWriter{store: storeFn, log: log, wake: make(chan struct{}, 1), now: make(chan struct{}, 1),
		done: make(chan struct{}), dropped: map[string]*droppedLogs{}}
	go w.run()
	return w
}

// append queues what fits of lines and counts the rest as dropped; it never
// waits for the store. After close (the daemon is stopping, no request is
// running) it writes at once.
func (w *logWriter) append(lines []store.LogLine) {
	if len(lines) == 0 {
		return
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		w.write(lines)
		return
	}
	for _, l := range lines {
		if len(w.pending) >= maxPendingLines || w.pendingBytes+len(l.Line) > maxPendingBytes {
			d := w.dropped[l.Function]
			if d == nil {
				d = &droppedLogs{}
				w.dropped[l.Function] = d
			}
			d.version = l.Version
			d.lines++
			d.bytes += int64(len(l.Line))
			continue
		}
		w.pending = append(w.pending, l)
		w.pendingBytes += len(l.Line)
	}
	full := len(w.pending) >= batchLines
	w.mu.Unlock()
	w.kick()
	if full {
		w.hurry()
	}
}

// takeLocked returns the queued lines, followed by one note per function
// that had lines dropped, and empties the queue.
func (w *logWriter) takeLocked() []store.LogLine {
	batch := w.pending
	w.pending, w.pendingBytes = nil, 0
	now := time.Now()
	for fn, d := range w.dropped {
		batch = append(batch, store.LogLine{Function: fn, Version: d.version, Stream: "zygo", At: now,
			Line: fmt.Sprintf("[zygo: %d log lines (%d bytes) dropped: the log store fell behind]", d.lines, d.bytes)})
		delete(w.dropped, fn)
	}
	return batch
}

func (w *logWriter) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// hurry ends the current batch's gathering (or the next one's, when none is
// gathering).
func (w *logWriter) hurry() {
	select {
	case w.now <- struct{}{}:
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
	w.hurry()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (w *logWriter) run() {
	defer close(w.done)
	gather := time.NewTimer(batchWindow)
	gather.Stop()
	for range w.wake {
		w.mu.Lock()
		wait := len(w.waiters) == 0
		w.mu.Unlock()
		if wait {
			gather.Reset(batchWindow)
			select {
			case <-gather.C:
			case <-w.now:
				gather.Stop()
			}
		}
		for {
			w.mu.Lock()
			batch, waiters := w.takeLocked(), w.waiters
			w.waiters = nil
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
