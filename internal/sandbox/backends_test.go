package sandbox_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
)

func newBackendsManager(t *testing.T, reg sandbox.Registry, be sandbox.Backend, more ...sandbox.Backend) *sandbox.Manager {
	t.Helper()
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: be, Backends: more, Registry: reg,
		ImageDir: t.TempDir(), Reseal: sandboxtest.FakeReseal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// instances returns the engine ids be has.
func instances(t *testing.T, be sandbox.Backend) []string {
	t.Helper()
	ids, err := be.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// recoverAll adopts the sandboxes of m's registry and waits for it.
func recoverAll(t *testing.T, m *sandbox.Manager) {
	t.Helper()
	r, err := m.StartRecover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// execOut runs a shell script in sandbox id and returns its stdout.
func execOut(ctx context.Context, m *sandbox.Manager, id, script string) (string, error) {
	var out bytes.Buffer
	_, err := m.Exec(ctx, id, guest.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, &out, nil)
	return out.String(), err
}

// TestImageOfAnotherBackendRefused: a checkpoint is restored only by the backend that wrote
// it. A Manager that would restore fake-a's image with fake-b (the daemon now configured
// with another engine, or a record naming another) refuses fork and rollback with
// ErrFailedPrecondition naming the backends, before any engine is touched; a Manager that has
// both serves each sandbox on its own.
func TestImageOfAnotherBackendRefused(t *testing.T) {
	ctx := context.Background()
	beA, beB := sandboxtest.NewNamedFakeBackend(t, "fake-a"), sandboxtest.NewNamedFakeBackend(t, "fake-b")
	reg := sandbox.NewMemRegistry()
	mA := newBackendsManager(t, reg, beA)
	src, err := mA.Create(ctx, sandbox.CreateOptions{Name: "src"})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := mA.Checkpoint(ctx, src.ID, "t")
	if err != nil {
		t.Fatal(err)
	}
	if src.Backend != "fake-a" || cp.Backend != "fake-a" {
		t.Fatalf("records name backends %q and %q, want fake-a", src.Backend, cp.Backend)
	}
	mA.Close() // its sandboxes keep running, as at a daemon restart

	t.Run("backend not configured", func(t *testing.T) {
		mB := newBackendsManager(t, reg, beB)
		_, err := mB.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, From: cp.ID})
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), `"fake-a"`) || !strings.Contains(err.Error(), "fake-b") {
			t.Errorf("fork of fake-a's image on a fake-b manager = %v, want failed_precondition naming both", err)
		}
		if _, err := mB.Rollback(ctx, src.ID, cp.ID); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("rollback to fake-a's image on a fake-b manager = %v, want failed_precondition", err)
		}
		if err := mB.Remove(ctx, src.ID); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("rm of a fake-a sandbox on a fake-b manager = %v, want failed_precondition", err)
		}
		if ids := instances(t, beB); len(ids) != 0 {
			t.Errorf("fake-b has instances %v after the refusals", ids)
		}
		recs, _ := reg.ListSandboxes(ctx)
		if len(recs) != 1 || recs[0].ID != src.ID || recs[0].State != sandbox.Running || recs[0].EngineID != src.EngineID {
			t.Errorf("records after the refusals: %+v, want only %s running on %s", recs, src.ID, src.EngineID)
		}
	})

	t.Run("image of another backend", func(t *testing.T) {
		forged := cp
		forged.ID, forged.Backend = "cp-forged", "fake-b" // fake-b's image in fake-a's lineage
		if err := reg.PutCheckpoint(ctx, forged); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.DeleteCheckpoint(ctx, forged.ID) })
		m := newBackendsManager(t, reg, beA, beB)
		recoverAll(t, m)
		before := instances(t, beA)
		_, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, From: forged.ID})
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), `image of backend "fake-b"`) {
			t.Errorf("fork of a fake-b image into a fake-a sandbox = %v, want failed_precondition naming fake-b", err)
		}
		if _, err := m.Rollback(ctx, src.ID, forged.ID); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("rollback of a fake-a sandbox to a fake-b image = %v, want failed_precondition", err)
		}
		if got := instances(t, beA); !slices.Equal(got, before) {
			t.Errorf("fake-a instances %v, want %v", got, before)
		}
		if ids := instances(t, beB); len(ids) != 0 {
			t.Errorf("fake-b has instances %v", ids)
		}
	})

	t.Run("both configured", func(t *testing.T) {
		m := newBackendsManager(t, reg, beB, beA) // new sandboxes on fake-b; fake-a's served too
		recoverAll(t, m)
		res, err := m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, From: cp.ID})
		if err != nil {
			t.Fatal(err)
		}
		child := res.Children[0].Sandbox
		if child.Backend != "fake-a" || !slices.Contains(instances(t, beA), child.EngineID) {
			t.Errorf("child on backend %q (fake-a has %v), want fake-a running %s", child.Backend, instances(t, beA), child.EngineID)
		}
		if out, err := execOut(ctx, m, child.ID, "echo hi"); err != nil || out != "hi\n" {
			t.Errorf("exec in the child = %q, %v", out, err)
		}
		fresh, err := m.Create(ctx, sandbox.CreateOptions{Name: "fresh"})
		if err != nil || fresh.Backend != "fake-b" {
			t.Errorf("create = %+v, %v, want a sandbox on fake-b", fresh, err)
		}
		for _, id := range []string{child.ID, fresh.ID, src.ID} {
			if err := m.Remove(ctx, id); err != nil {
				t.Errorf("rm %s: %v", id, err)
			}
		}
		if a, b := instances(t, beA), instances(t, beB); len(a)+len(b) != 0 {
			t.Errorf("instances left: fake-a %v, fake-b %v", a, b)
		}
	})
}
