package function

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/agentproc"
)

// fakeWorker is a oneShot that records whether it was stopped.
type fakeWorker struct {
	id      int
	dead    atomic.Bool
	stopped atomic.Bool
}

func (w *fakeWorker) Run(context.Context, agentproc.Request) (*agentproc.Result, error) {
	return &agentproc.Result{Child: agentproc.ChildWorker}, nil
}
func (w *fakeWorker) Stop() { w.stopped.Store(true) }

// Done is closed: a fake worker has nothing to wait for after its answer.
func (w *fakeWorker) Done() <-chan struct{} { return closedChan }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (w *fakeWorker) Err() error {
	if w.dead.Load() {
		return errors.New("fake worker exited")
	}
	return nil
}
func (w *fakeWorker) SecretsDir() string { return "" }
func (w *fakeWorker) HostUID() int       { return 0 }

// fakeWorkers starts fakeWorkers, failing while fail is set.
type fakeWorkers struct {
	mu      sync.Mutex
	started []*fakeWorker
	fail    bool
}

func (f *fakeWorkers) start(context.Context) (oneShot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("fake start failure")
	}
	w := &fakeWorker{id: len(f.started)}
	f.started = append(f.started, w)
	return w, nil
}

func (f *fakeWorkers) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWorkerPoolKeepsSizeReady: the pool fills to its size (the first
// worker given counts), a take hands out a ready one and the filler
// replaces it, an idle worker found dead is stopped and skipped, and close
// stops every idle worker and the filler.
func TestWorkerPoolKeepsSizeReady(t *testing.T) {
	f := &fakeWorkers{}
	first := &fakeWorker{id: -1}
	p := newWorkerPool(2, first, f.start, slog.Default())
	waitFor(t, "2 ready workers", func() bool { return p.idle() == 2 })
	if n := f.count(); n != 1 {
		t.Fatalf("started %d workers beside the first, want 1", n)
	}
	w, cold, err := p.take(context.Background())
	if err != nil || cold || w != oneShot(first) {
		t.Fatalf("take: %v (cold %v, %v), want the first worker, warm", w, cold, err)
	}
	p.done()
	waitFor(t, "the taken worker replaced", func() bool { return p.idle() == 2 && f.count() == 2 })
	f.mu.Lock()
	f.started[0].dead.Store(true) // the older idle one dies
	f.mu.Unlock()
	w, _, err = p.take(context.Background())
	if err != nil || w.(*fakeWorker).id != 1 {
		t.Fatalf("take after a death: %v, %v; want worker 1", w, err)
	}
	p.done()
	if !f.started[0].stopped.Load() {
		t.Error("the dead idle worker was not stopped")
	}
	p.close()
	p.close() // idempotent
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.started[2:] {
		if !w.stopped.Load() {
			t.Errorf("idle worker %d not stopped by close", w.id)
		}
	}
}

// TestWorkerPoolColdStartAndBackoff: with nothing idle, take starts a
// worker inline (cold); a filler whose starts fail backs off until close,
// which returns at once.
func TestWorkerPoolColdStartAndBackoff(t *testing.T) {
	f := &fakeWorkers{fail: true}
	p := newWorkerPool(1, nil, f.start, slog.Default())
	if _, _, err := p.take(context.Background()); err == nil {
		t.Fatal("take with failing starts succeeded")
	}
	p.done()
	f.mu.Lock()
	f.fail = false
	f.mu.Unlock()
	w, cold, err := p.take(context.Background())
	if err != nil || !cold || w == nil {
		t.Fatalf("take: %v, cold %v, %v; want a cold start", w, cold, err)
	}
	p.done()
	waitFor(t, "the filler to recover after its backoff", func() bool { return p.idle() == 1 })
	closed := make(chan struct{})
	go func() { p.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close waited for the filler's backoff")
	}
}

// TestWorkerPoolRefillWaitsForTheRequest: while a worker is still ready, the
// replacement of a taken one starts once the request is done (and
// answerGrace after), or after refillDelay while it is still in flight, not
// beside it at once; with none ready it starts at once.
func TestWorkerPoolRefillWaitsForTheRequest(t *testing.T) {
	f := &fakeWorkers{}
	p := newWorkerPool(2, &fakeWorker{id: -1}, f.start, slog.Default())
	defer p.close()
	waitFor(t, "2 ready workers", func() bool { return p.idle() == 2 })
	p.refillDelay, p.answerGrace = time.Hour, time.Millisecond // before the take, which hands them to the filler
	if _, cold, err := p.take(context.Background()); err != nil || cold {
		t.Fatalf("take: cold %v, %v", cold, err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.count(); n != 1 {
		t.Fatalf("%d replacements started while the request was in flight", n-1)
	}
	p.done()
	waitFor(t, "the replacement after done", func() bool { return f.count() == 2 && p.idle() == 2 })

	q := newWorkerPool(2, &fakeWorker{id: -1}, f.start, slog.Default())
	defer q.close()
	waitFor(t, "2 ready workers", func() bool { return q.idle() == 2 })
	q.refillDelay = 50 * time.Millisecond
	if _, _, err := q.take(context.Background()); err != nil { // never done
		t.Fatal(err)
	}
	waitFor(t, "the replacement after refillDelay", func() bool { return f.count() == 4 && q.idle() == 2 })

	r := newWorkerPool(1, &fakeWorker{id: -1}, f.start, slog.Default())
	defer r.close()
	r.refillDelay = time.Hour
	if _, _, err := r.take(context.Background()); err != nil { // never done; none left ready
		t.Fatal(err)
	}
	waitFor(t, "the replacement at once when none is ready", func() bool { return f.count() == 5 && r.idle() == 1 })
}
