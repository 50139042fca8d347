package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// watchedFake is fakeBackend with an ExitWatcher: kill(id) makes WaitExit(id) return.
type watchedFake struct {
	*fakeBackend
	mu    sync.Mutex // guards exits
	exits map[string]chan struct{}
}

func (w *watchedFake) exit(id string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.exits[id] == nil {
		w.exits[id] = make(chan struct{})
	}
	return w.exits[id]
}

func (w *watchedFake) WaitExit(ctx context.Context, id string) error {
	select {
	case <-w.exit(id):
		return fmt.Errorf("killed: %w", ErrEngineExited)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestFailedRollbackWhoseOldEngineDied: when the old engine dies while a rollback restores
// (and the restore fails), the sandbox ends dead with the cause, not running on an engine that
// is gone and not rolling_back; rm then removes it.
func TestFailedRollbackWhoseOldEngineDied(t *testing.T) {
	ctx := context.Background()
	be := &watchedFake{fakeBackend: newFake(), exits: map[string]chan struct{}{}}
	m := newTestManager(t, be, NewMemRegistry(), nil)
	defer m.Close()
	src, err := m.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	be.failRestore = func(Spec) error {
		close(be.exit(src.EngineID)) // the old engine dies meanwhile
		m.mu.Lock()
		e := m.live[src.ID]
		m.mu.Unlock()
		<-e.ctx.Done() // its watch has noticed
		return errors.New("injected: restore failed")
	}
	if _, err := m.Rollback(ctx, src.ID, cp.ID); err == nil {
		t.Fatal("rollback succeeded")
	}
	rec, err := m.Get(ctx, src.ID)
	if err != nil || rec.State != Dead || !strings.Contains(rec.Error, "killed") {
		t.Fatalf("after a failed rollback whose old engine died: %s %q (%v), want dead with the cause", rec.State, rec.Error, err)
	}
	if err := m.Remove(ctx, src.ID); err != nil {
		t.Errorf("rm of the dead sandbox: %v", err)
	}
}
