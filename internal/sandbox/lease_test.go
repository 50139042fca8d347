package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
)

// hangGuard is how long a test waits for calls that must not be held up before it reports
// them stalled. It is not a performance bound: on today's code they wait for ever.
const hangGuard = 60 * time.Second

func newLeaseManager(t *testing.T, be sandbox.Backend, reg sandbox.Registry) *sandbox.Manager {
	t.Helper()
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: be, Registry: reg, ImageDir: t.TempDir(),
		Reseal: sandboxtest.FakeReseal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func ctxL(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*hangGuard)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, m *sandbox.Manager, name string) sandbox.SandboxRecord {
	t.Helper()
	rec, err := m.Create(ctxL(t), sandbox.CreateOptions{Name: name})
	if err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	return rec
}

// otherCalls runs Get, List, Create and Exec on sandboxes other than the checkpoint's and
// returns their first error.
func otherCalls(ctx context.Context, m *sandbox.Manager, other string) error {
	if _, err := m.Get(ctx, other); err != nil {
		return err
	}
	if _, err := m.List(ctx); err != nil {
		return err
	}
	c, err := m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	st, err := m.Exec(ctx, other, guest.ExecRequest{Argv: []string{"/bin/echo", "still here"}}, &out, nil)
	if err != nil {
		return err
	}
	if st.Code != 0 || out.String() != "still here\n" {
		return errors.New("exec answered " + out.String())
	}
	return m.Remove(ctx, c.ID)
}

// TestCheckpointRmDoesNotStallOtherCalls: while a checkpoints rm is stuck deleting a large
// image (or its record), Get, List, Create and Exec of other sandboxes go on; the rm then
// reports success and the image is gone. Before the lease, rm held the Manager's lock across
// both deletions and every other call waited for it.
func TestCheckpointRmDoesNotStallOtherCalls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block func(m *sandbox.Manager, reg *sandboxtest.FaultyRegistry, release chan struct{}) <-chan struct{}
	}{
		{"image deletion blocks", func(m *sandbox.Manager, _ *sandboxtest.FaultyRegistry, release chan struct{}) <-chan struct{} {
			entered := make(chan struct{})
			sandbox.SetRemoveImage(m, func(dir string) error { close(entered); <-release; return os.RemoveAll(dir) })
			return entered
		}},
		{"record deletion blocks", func(_ *sandbox.Manager, reg *sandboxtest.FaultyRegistry, release chan struct{}) <-chan struct{} {
			return reg.BlockNextDeleteCheckpoint(release)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxL(t)
			reg := sandboxtest.NewFaultyRegistry()
			m := newLeaseManager(t, sandboxtest.NewFakeBackend(t), reg)
			src, other := mustCreate(t, m, "src"), mustCreate(t, m, "other")
			cp, err := m.Checkpoint(ctx, src.ID, "big")
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			entered := tc.block(m, reg, release)
			rmDone := make(chan error, 1)
			go func() { rmDone <- m.RemoveCheckpoint(ctx, cp.ID) }()
			<-entered
			callsDone := make(chan error, 1)
			go func() { callsDone <- otherCalls(ctx, m, other.Name) }()
			select {
			case err := <-callsDone:
				if err != nil {
					t.Errorf("calls on another sandbox while rm deletes: %v", err)
				}
			case <-time.After(hangGuard):
				t.Errorf("Get/List/Create/Exec of another sandbox stalled behind a checkpoints rm")
			}
			close(release)
			if err := <-rmDone; err != nil {
				t.Fatalf("checkpoints rm: %v", err)
			}
			if _, err := os.Stat(cp.Dir); !os.IsNotExist(err) {
				t.Errorf("image dir after rm: %v", err)
			}
			if _, err := m.GetCheckpoint(ctx, cp.ID); !errdefs.IsNotFound(err) {
				t.Errorf("checkpoint after rm: %v", err)
			}
		})
	}
}

// TestCheckpointRmRefusedWhileLeased: a checkpoints rm while a rollback or a fork is restoring
// the checkpoint is refused (409, saying why), and the rollback or fork still succeeds. Before
// the lease, the rm of a rollback's checkpoint deleted the image under the restore.
func TestCheckpointRmRefusedWhileLeased(t *testing.T) {
	for _, op := range []string{"rollback", "fork"} {
		t.Run(op, func(t *testing.T) {
			ctx := ctxL(t)
			be := sandboxtest.NewFakeBackend(t)
			m := newLeaseManager(t, be, sandbox.NewMemRegistry())
			src := mustCreate(t, m, "src")
			cp, err := m.Checkpoint(ctx, src.ID, "base")
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			be.SetBeforeRestore(func(sandbox.Spec) error { close(entered); <-release; return nil })
			done := make(chan error, 1)
			go func() {
				if op == "rollback" {
					_, err := m.Rollback(ctx, src.ID, cp.ID)
					done <- err
					return
				}
				_, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, From: cp.ID})
				done <- err
			}()
			<-entered
			err = m.RemoveCheckpoint(ctx, cp.ID)
			if !errdefs.IsFailedPrecondition(err) {
				t.Errorf("rm during a %s = %v, want refused (failed precondition)", op, err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("%s after the refused rm: %v", op, err)
			}
			if _, err := os.Stat(cp.Dir); err != nil {
				t.Errorf("image after the refused rm: %v", err)
			}
			// Now the copy refers to it, so it is refused by reference; gone with the copy.
			if err := m.RemoveCheckpoint(ctx, cp.ID); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "referenced") {
				t.Errorf("rm of a checkpoint a sandbox was restored from = %v", err)
			}
		})
	}
}

// TestCheckpointLeaseRefusedWhileRemoving: a fork from a checkpoint whose rm is under way (its
// deletion blocked) is refused as not found, and makes nothing.
func TestCheckpointLeaseRefusedWhileRemoving(t *testing.T) {
	ctx := ctxL(t)
	reg := sandboxtest.NewFaultyRegistry()
	be := sandboxtest.NewFakeBackend(t)
	m := newLeaseManager(t, be, reg)
	src := mustCreate(t, m, "src")
	cp, err := m.Checkpoint(ctx, src.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := reg.BlockNextDeleteCheckpoint(release)
	rmDone := make(chan error, 1)
	go func() { rmDone <- m.RemoveCheckpoint(ctx, cp.ID) }()
	<-entered
	_, ferr := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, From: cp.ID})
	close(release)
	if !errdefs.IsNotFound(ferr) {
		t.Errorf("fork from a checkpoint being removed = %v, want not found", ferr)
	}
	if err := <-rmDone; err != nil {
		t.Errorf("rm: %v", err)
	}
	if recs, _ := m.List(ctx); len(recs) != 1 {
		t.Errorf("records after the refused fork: %+v", recs)
	}
}

// TestFailedRollbackEndsInADefiniteState: a rollback whose restore fails and whose first write
// of the sandbox's state fails too (the store hiccups) leaves the sandbox running on its old
// engine, as Get reports, and later calls work; a rollback whose restore succeeds but whose
// first save of the new state fails still completes. Before, both left it rolling_back until
// a daemon restart.
func TestFailedRollbackEndsInADefiniteState(t *testing.T) {
	ctx := ctxL(t)
	reg := sandboxtest.NewFaultyRegistry()
	be := sandboxtest.NewFakeBackend(t)
	m := newLeaseManager(t, be, reg)
	src := mustCreate(t, m, "src")
	cp, err := m.Checkpoint(ctx, src.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	be.SetBeforeRestore(func(sandbox.Spec) error { return errors.New("injected: restore failed") })
	reg.FailNextPutSandbox(sandbox.Running)
	if _, err := m.Rollback(ctx, src.ID, cp.ID); err == nil || !strings.Contains(err.Error(), "injected: restore failed") {
		t.Fatalf("failed rollback = %v, want the restore's error", err)
	}
	rec, err := m.Get(ctx, src.ID)
	if err != nil || rec.State != sandbox.Running || rec.EngineID != src.EngineID {
		t.Fatalf("after a failed rollback: %s on %s (%v), want running on %s", rec.State, rec.EngineID, err, src.EngineID)
	}
	if ids, _ := be.List(ctx); len(ids) != 1 || ids[0] != src.EngineID {
		t.Errorf("instances after the failed rollback: %v", ids)
	}
	if err := otherCalls(ctx, m, src.ID); err != nil {
		t.Errorf("calls after the failed rollback: %v", err)
	}

	be.SetBeforeRestore(nil)
	reg.FailNextPutSandbox(sandbox.Running)
	rb, err := m.Rollback(ctx, src.ID, cp.ID)
	if err != nil {
		t.Fatalf("rollback whose first save failed: %v", err)
	}
	rec, _ = m.Get(ctx, src.ID)
	if rec.State != sandbox.Running || rec.EngineID != rb.EngineID || rec.EngineID == src.EngineID {
		t.Errorf("after the rollback: %s on %s, want running on the new %s", rec.State, rec.EngineID, rb.EngineID)
	}
	if ids, _ := be.List(ctx); len(ids) != 1 || ids[0] != rb.EngineID {
		t.Errorf("instances after the rollback: %v, want only %s", ids, rb.EngineID)
	}
	var out bytes.Buffer
	if _, err := m.Exec(ctx, src.ID, guest.ExecRequest{Argv: []string{"/bin/echo", "rolled"}}, &out, nil); err != nil || out.String() != "rolled\n" {
		t.Errorf("exec after the rollback = %q, %v", out.String(), err)
	}
}
