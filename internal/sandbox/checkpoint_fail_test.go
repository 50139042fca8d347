package sandbox_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/sandboxtest"
)

// failingCheckpointer is a FakeBackend whose Checkpoint, when fail is set, writes the image and
// then fails (as a backend whose guest did not come back would).
type failingCheckpointer struct {
	*sandboxtest.FakeBackend
	mu   sync.Mutex
	fail error
}

func (b *failingCheckpointer) set(err error) {
	b.mu.Lock()
	b.fail = err
	b.mu.Unlock()
}

func (b *failingCheckpointer) Checkpoint(ctx context.Context, id, imageDir string) error {
	if err := b.FakeBackend.Checkpoint(ctx, id, imageDir); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fail
}

// TestCheckpointFailuresLeaveNothing: whichever step of a checkpoint fails — the engine after
// writing the image, the checkpoint record, the source's state, or the caller's ctx — no image
// dir and no record are left and the source is Running and can checkpoint again.
func TestCheckpointFailuresLeaveNothing(t *testing.T) {
	ctx := ctxL(t)
	be := &failingCheckpointer{FakeBackend: sandboxtest.NewFakeBackend(t)}
	reg := sandboxtest.NewFaultyRegistry()
	images := t.TempDir()
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: be, Registry: reg, ImageDir: images,
		Reseal: sandboxtest.FakeReseal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	src := mustCreate(t, m, "src")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		inject func()
	}{
		{"engine fails after writing the image", ctx, func() { be.set(errors.New("injected: guest did not reconnect")) }},
		{"checkpoint record not saved", ctx, reg.FailNextPutCheckpoint},
		{"source state not saved", ctx, func() { reg.FailNextPutSandbox(sandbox.Running) }},
		{"ctx cancelled", cancelled, func() {}},
	} {
		be.set(nil)
		tc.inject()
		if _, err := m.Checkpoint(tc.ctx, src.ID, "x"); err == nil {
			t.Errorf("%s: checkpoint succeeded", tc.name)
		}
		if ents, _ := os.ReadDir(images); len(ents) != 0 {
			t.Errorf("%s: image dirs left: %v", tc.name, ents)
		}
		if cps, _ := reg.ListCheckpoints(ctx); len(cps) != 0 {
			t.Errorf("%s: checkpoint records left: %v", tc.name, cps)
		}
		if rec, _ := m.Get(ctx, src.ID); rec.State != sandbox.Running {
			t.Errorf("%s: source is %s, want running", tc.name, rec.State)
		}
	}
	be.set(nil)
	if _, err := m.Checkpoint(ctx, src.ID, "ok"); err != nil {
		t.Errorf("checkpoint after the failures: %v", err)
	}
}
