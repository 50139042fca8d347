package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
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

// TestDeadSandboxErrorSaysRm: a call on a sandbox whose engine died fails with ErrDead, the
// cause, and the next step (zygo sandbox rm ID removes it), both while the death is being
// marked and once the sandbox is recorded Dead.
func TestDeadSandboxErrorSaysRm(t *testing.T) {
	ctx := context.Background()
	be := &watchedFake{fakeBackend: newFake(), exits: map[string]chan struct{}{}}
	m := newTestManager(t, be, NewMemRegistry(), nil)
	defer m.Close()
	sb, err := m.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	e := m.live[sb.ID]
	m.mu.Unlock()
	close(be.exit(sb.EngineID))
	<-e.ctx.Done() // its watch has noticed; marking it Dead may still be under way
	check := func(when string) {
		_, err := m.Checkpoint(ctx, sb.ID, "")
		if !errors.Is(err, ErrDead) || !strings.Contains(err.Error(), "killed") ||
			!strings.HasSuffix(err.Error(), "(zygo sandbox rm "+sb.ID+" removes it)") {
			t.Errorf("call on a dead sandbox (%s): %v", when, err)
		}
	}
	check("its engine died")
	for give := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if rec, _ := m.Get(ctx, sb.ID); rec.State == Dead {
			break
		} else if time.Now().After(give) {
			t.Fatalf("never marked dead: %s", rec.State)
		}
	}
	check("recorded dead")
}
