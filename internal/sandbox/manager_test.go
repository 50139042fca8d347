package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
)

// fakeBackend is an in-memory Backend and Checkpointer: instances are names, images are
// directories with one file. failRestore, when set, decides which restores fail.
type fakeBackend struct {
	mu          sync.Mutex // guards the fields below
	running     map[string]bool
	failRestore func(spec Spec) error
	failCreate  error // when set, Create fails with it after making the instance
	// failCheckpoint, when set, makes Checkpoint fail with it after writing the image (as a
	// backend whose guest did not come back would).
	failCheckpoint error
	creates        int
	destroyed      []string
	// attachGate, when set, holds every Attach until it is closed (or the ctx ends);
	// attaching and maxAttaching count the Attach calls waiting there.
	attachGate   chan struct{}
	attaching    int
	maxAttaching int
}

var (
	_ Backend      = (*fakeBackend)(nil)
	_ Checkpointer = (*fakeBackend)(nil)
)

func newFake() *fakeBackend { return &fakeBackend{running: map[string]bool{}} }

func (f *fakeBackend) Name() string { return "fake" }

func (f *fakeBackend) Create(_ context.Context, spec Spec) (*Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[spec.ID] {
		return nil, errdefs.ErrExists
	}
	f.creates++
	f.running[spec.ID] = true
	if f.failCreate != nil { // half-made: the instance exists, the call fails
		return nil, f.failCreate
	}
	return &Instance{ID: spec.ID}, nil
}

func (f *fakeBackend) Attach(ctx context.Context, spec Spec) (*Instance, error) {
	f.mu.Lock()
	gate := f.attachGate
	f.attaching++
	f.maxAttaching = max(f.maxAttaching, f.attaching)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.attaching--
		f.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running[spec.ID] {
		return nil, errdefs.ErrNotFound
	}
	return &Instance{ID: spec.ID}, nil
}

func (f *fakeBackend) Destroy(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[id] {
		f.destroyed = append(f.destroyed, id)
	}
	delete(f.running, id)
	return nil
}

func (f *fakeBackend) List(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.running {
		ids = append(ids, id)
	}
	return ids, nil
}

func (f *fakeBackend) Checkpoint(_ context.Context, id, dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running[id] {
		return errdefs.ErrNotFound
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte(id), 0o600); err != nil {
		return err
	}
	return f.failCheckpoint
}

func (f *fakeBackend) Restore(ctx context.Context, dir string, spec Spec) (*Instance, error) {
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return nil, errdefs.ErrNotFound
	}
	f.mu.Lock()
	fail := f.failRestore
	f.creates-- // a restore is not a create
	f.mu.Unlock()
	if fail != nil {
		if err := fail(spec); err != nil {
			return nil, err
		}
	}
	return f.Create(ctx, spec)
}

func (f *fakeBackend) isRunning(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[id]
}

// fakeReseal acknowledges like a guest would, with a random entropy sample.
func fakeReseal(_ context.Context, t ResealTarget) (guest.ResealResult, error) {
	s := make([]byte, 32)
	_, _ = rand.Read(s)
	return guest.ResealResult{Generation: t.Sandbox.Generation, EntropySample: s}, nil
}

func newTestManager(t *testing.T, be Backend, reg Registry, reseal ResealFunc) *Manager {
	t.Helper()
	if reseal == nil {
		reseal = fakeReseal
	}
	m, err := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: t.TempDir(), Reseal: reseal})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTransition(t *testing.T) {
	if err := transition("a", Running, Checkpointing); err != nil {
		t.Errorf("running -> checkpointing: %v", err)
	}
	err := transition("a", Restoring, Running) // reseal may not be skipped
	var te *TransitionError
	if !errors.As(err, &te) || te.From != Restoring || te.To != Running || !errdefs.IsFailedPrecondition(err) {
		t.Errorf("restoring -> running = %v, want a TransitionError", err)
	}
	if err := transition("a", Failed, Removing); err != nil {
		t.Errorf("failed -> removing: %v", err)
	}
	if err := transition("a", Removing, Removing); err == nil {
		t.Errorf("removing -> removing allowed")
	}
}

func TestForkTreeAndReferences(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	src, err := m.Create(ctx, CreateOptions{Name: "src"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Fork(ctx, "src", ForkOptions{N: 3})
	if err != nil || len(res.Children) != 3 {
		t.Fatalf("Fork = %+v, %v", res, err)
	}
	kid := res.Children[0].Sandbox
	if kid.ParentID != src.ID || kid.CheckpointID != res.Checkpoint.ID || kid.State != Running || kid.Generation == src.Generation {
		t.Errorf("child record %+v", kid)
	}
	cp2, err := m.Checkpoint(ctx, kid.ID, "second")
	if err != nil || cp2.ParentID != res.Checkpoint.ID {
		t.Fatalf("checkpoint of a child = %+v, %v; want parent %s", cp2, err, res.Checkpoint.ID)
	}
	if err := m.RemoveCheckpoint(ctx, res.Checkpoint.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("RemoveCheckpoint referenced = %v", err)
	}
	for _, c := range res.Children {
		if err := m.Remove(ctx, c.Sandbox.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.RemoveCheckpoint(ctx, res.Checkpoint.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("RemoveCheckpoint with a child checkpoint = %v", err)
	}
	if err := m.RemoveCheckpoint(ctx, "second"); err != nil {
		t.Errorf("RemoveCheckpoint by tag: %v", err)
	}
	if err := m.RemoveCheckpoint(ctx, res.Checkpoint.ID); err != nil {
		t.Errorf("RemoveCheckpoint unreferenced: %v", err)
	}
	if _, err := os.Stat(res.Checkpoint.Dir); !os.IsNotExist(err) {
		t.Errorf("image dir left: %v", err)
	}
}

func TestForkPartialFailure(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	src, _ := m.Create(ctx, CreateOptions{})
	n := 0
	var mu sync.Mutex
	be.failRestore = func(Spec) error {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n%2 == 0 {
			return fmt.Errorf("injected restore failure: %w", errdefs.ErrUnavailable)
		}
		return nil
	}
	res, err := m.Fork(ctx, src.ID, ForkOptions{N: 4})
	if err != nil {
		t.Fatalf("partial fork returned %v", err)
	}
	ok, failed := 0, 0
	for _, c := range res.Children {
		if c.Err != nil {
			failed++
			if c.Error == "" {
				t.Errorf("failed child without an error text")
			}
		} else {
			ok++
		}
	}
	recs, _ := m.List(ctx)
	if ok != 2 || failed != 2 || len(recs) != 3 {
		t.Errorf("ok=%d failed=%d records=%d, want 2, 2, 3", ok, failed, len(recs))
	}
	be.failRestore = func(Spec) error { return errors.New("always") }
	if _, err := m.Fork(ctx, src.ID, ForkOptions{N: 2}); err == nil {
		t.Errorf("fork with every child failing returned nil")
	}
}

func TestForkDuplicateEntropyFailsBoth(t *testing.T) {
	ctx := context.Background()
	same := func(_ context.Context, t ResealTarget) (guest.ResealResult, error) {
		return guest.ResealResult{Generation: t.Sandbox.Generation, EntropySample: make([]byte, 32)}, nil
	}
	be := newFake()
	m := newTestManager(t, be, NewMemRegistry(), same)
	src, _ := m.Create(ctx, CreateOptions{})
	res, err := m.Fork(ctx, src.ID, ForkOptions{N: 2})
	if err == nil || !errors.Is(res.Children[0].Err, errDuplicateEntropy) || !errors.Is(res.Children[1].Err, errDuplicateEntropy) {
		t.Fatalf("fork with equal entropy samples = %+v, %v", res, err)
	}
	if ids, _ := be.List(ctx); len(ids) != 1 {
		t.Errorf("instances left: %v", ids)
	}
}

func TestRollbackKeepsIDAndOldOnFailure(t *testing.T) {
	ctx := context.Background()
	be := newFake()
	m := newTestManager(t, be, NewMemRegistry(), nil)
	src, _ := m.Create(ctx, CreateOptions{})
	cp, err := m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	rb, err := m.Rollback(ctx, src.ID, cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rb.ID != src.ID || rb.EngineID == src.EngineID || rb.Generation == src.Generation || rb.CheckpointID != cp.ID {
		t.Errorf("rolled back record %+v", rb)
	}
	if be.isRunning(src.EngineID) || !be.isRunning(rb.EngineID) {
		t.Errorf("old instance running=%v, new running=%v", be.isRunning(src.EngineID), be.isRunning(rb.EngineID))
	}
	be.failRestore = func(Spec) error { return errors.New("injected") }
	if _, err := m.Rollback(ctx, src.ID, cp.ID); err == nil {
		t.Fatal("failed rollback returned nil")
	}
	rec, _ := m.Get(ctx, src.ID)
	if rec.State != Running || rec.EngineID != rb.EngineID || !be.isRunning(rb.EngineID) {
		t.Errorf("after a failed rollback: %+v", rec)
	}
}

func TestRecover(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	alive, _ := m.Create(ctx, CreateOptions{Name: "alive"})
	dead, _ := m.Create(ctx, CreateOptions{Name: "dead"})
	half := SandboxRecord{ID: "sb-half", Name: "half", EngineID: "sb-half-1", State: Resealing}
	_ = reg.PutSandbox(ctx, half)
	be.running["sb-half-1"] = true
	be.running["orphan-1"] = true
	delete(be.running, dead.EngineID) // the engine died while the daemon was down
	os.MkdirAll(filepath.Join(m.cfg.ImageDir, ".cp-x.partial"), 0o700)

	m2, err := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: m.cfg.ImageDir, Reseal: fakeReseal})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := m2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{alive.ID}, []string{dead.ID}, []string{"sb-half"}, []string{"orphan-1"})
	if got := fmt.Sprint(rep.Adopted, rep.Dead, rep.Dropped, rep.Orphans); got != want {
		t.Errorf("Recover = %s, want %s", got, want)
	}
	if rec, _ := m2.Get(ctx, "dead"); rec.State != Dead || rec.Error == "" {
		t.Errorf("dead sandbox record %+v", rec)
	}
	if _, err := m2.Get(ctx, "half"); !errdefs.IsNotFound(err) {
		t.Errorf("half-made sandbox still has a record")
	}
	if ents, _ := os.ReadDir(m.cfg.ImageDir); len(ents) != 0 {
		t.Errorf("stray image dirs left: %v", ents)
	}
	if _, err := m2.Checkpoint(ctx, "alive", ""); err != nil {
		t.Errorf("adopted sandbox cannot checkpoint: %v", err)
	}
}

func TestMemRegistry(t *testing.T) {
	ctx := context.Background()
	r := NewMemRegistry()
	_ = r.PutSandbox(ctx, SandboxRecord{ID: "a", Name: "n"})
	if err := r.PutSandbox(ctx, SandboxRecord{ID: "b", Name: "n"}); !errdefs.IsExists(err) {
		t.Errorf("duplicate name = %v", err)
	}
	if err := r.PutCheckpoint(ctx, CheckpointRecord{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := r.PutCheckpoint(ctx, CheckpointRecord{ID: "c"}); !errdefs.IsExists(err) {
		t.Errorf("checkpoints are immutable, got %v", err)
	}
	if _, err := r.GetSandbox(ctx, "zz"); !errdefs.IsNotFound(err) {
		t.Errorf("GetSandbox unknown = %v", err)
	}
	if err := r.DeleteCheckpoint(ctx, "zz"); !errdefs.IsNotFound(err) {
		t.Errorf("DeleteCheckpoint unknown = %v", err)
	}
}

// TestCheckpointsUnknownSandbox: listing the checkpoints of a sandbox that does not exist is
// ErrNotFound, not an empty list; a removed sandbox's id still lists the checkpoints taken of
// it, and a sandbox without checkpoints lists none.
func TestCheckpointsUnknownSandbox(t *testing.T) {
	ctx := context.Background()
	m := newTestManager(t, newFake(), NewMemRegistry(), nil)
	if _, err := m.Checkpoints(ctx, "nosuch"); !errdefs.IsNotFound(err) {
		t.Errorf("Checkpoints(nosuch) = %v, want ErrNotFound", err)
	}
	sb, err := m.Create(ctx, CreateOptions{Name: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	if cps, err := m.Checkpoints(ctx, "sb"); err != nil || len(cps) != 0 {
		t.Errorf("Checkpoints of a sandbox without any = %v, %v; want an empty list", cps, err)
	}
	cp, err := m.Checkpoint(ctx, "sb", "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if cps, err := m.Checkpoints(ctx, sb.ID); err != nil || len(cps) != 1 || cps[0].ID != cp.ID {
		t.Errorf("Checkpoints of a removed sandbox = %v, %v; want its checkpoint", cps, err)
	}
	if _, err := m.Checkpoints(ctx, "sb"); !errdefs.IsNotFound(err) {
		t.Errorf("Checkpoints by the removed sandbox's name = %v, want ErrNotFound", err)
	}
}

// TestCorruptImageRefused: a checkpoint whose image no longer matches its checksums is
// refused by fork and rollback, naming the checkpoint and the file, before anything is made;
// a checkpoint recorded without checksums (an older daemon's) still restores.
func TestCorruptImageRefused(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	src, _ := m.Create(ctx, CreateOptions{})
	cp, err := m.Checkpoint(ctx, src.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Checksums) != 1 || cp.Checksums["checkpoint.img"] == "" {
		t.Fatalf("checkpoint checksums %v, want one per image file", cp.Checksums)
	}
	img := filepath.Join(cp.Dir, "checkpoint.img")
	good, _ := os.ReadFile(img)
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0xff
	extra := filepath.Join(cp.Dir, "stray.img")
	for _, tc := range []struct {
		name, file string
		corrupt    func()
	}{
		{"flipped byte", "checkpoint.img", func() { os.WriteFile(img, bad, 0o600) }},
		{"missing file", "checkpoint.img", func() { os.Remove(img) }},
		{"extra file", "stray.img", func() { os.WriteFile(extra, []byte("x"), 0o600) }},
	} {
		tc.corrupt()
		_, ferr := m.Fork(ctx, src.ID, ForkOptions{N: 3, From: cp.ID})
		_, rerr := m.Rollback(ctx, src.ID, "base")
		for op, err := range map[string]error{"fork": ferr, "rollback": rerr} {
			var ce *CorruptImageError
			if !errors.As(err, &ce) || ce.Checkpoint != cp.ID || ce.File != tc.file || !errdefs.IsFailedPrecondition(err) {
				t.Errorf("%s: %s = %v, want a CorruptImageError naming %s and %s", tc.name, op, err, cp.ID, tc.file)
			}
		}
		if recs, _ := m.List(ctx); len(recs) != 1 || recs[0].EngineID != src.EngineID || recs[0].State != Running {
			t.Errorf("%s: records after refused fork and rollback: %+v", tc.name, recs)
		}
		if ids, _ := be.List(ctx); len(ids) != 1 {
			t.Errorf("%s: instances %v, want only the source", tc.name, ids)
		}
		os.WriteFile(img, good, 0o600)
		os.Remove(extra)
	}
	if res, err := m.Fork(ctx, src.ID, ForkOptions{N: 1, From: cp.ID}); err != nil || len(res.Children) != 1 {
		t.Errorf("fork of the repaired image = %+v, %v", res, err)
	}
	// A checkpoint an older daemon recorded has no checksums: restored unverified.
	old := cp
	old.ID, old.Checksums = "cp-old", nil
	if err := reg.PutCheckpoint(ctx, old); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(img, bad, 0o600)
	if _, err := m.Rollback(ctx, src.ID, "cp-old"); err != nil {
		t.Errorf("rollback to a checkpoint without checksums: %v", err)
	}
}

// TestRecoverInBackground: recovery does not hold the caller up. While the attaches are held,
// StartRecover has returned, every sandbox shows as recovering, calls on one answer the
// retryable ErrRecovering at once, rm waits for it; at most RecoverWorkers attach at a time,
// more than one at once; once released, all are running and usable.
func TestRecoverInBackground(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	var ids []string
	for range 12 {
		rec, err := m.Create(ctx, CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	_ = m.Close()
	be.attachGate = make(chan struct{})
	m2, err := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: m.cfg.ImageDir, Reseal: fakeReseal, RecoverWorkers: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	started := make(chan *Recovery, 1)
	go func() {
		r, err := m2.StartRecover(ctx)
		if err != nil {
			t.Error(err)
		}
		started <- r
	}()
	var r *Recovery
	select {
	case r = <-started:
	case <-time.After(30 * time.Second):
		close(be.attachGate)
		t.Fatal("StartRecover waited for the attaches")
	}
	if rec, _ := m2.Get(ctx, ids[0]); rec.State != Recovering {
		t.Errorf("a sandbox being recovered shows as %s", rec.State)
	}
	if recs, _ := m2.List(ctx); len(recs) != len(ids) || recs[len(recs)-1].State != Recovering {
		t.Errorf("List while recovering: %+v", recs)
	}
	if _, err := m2.Checkpoint(ctx, ids[0], ""); !errors.Is(err, ErrRecovering) || !errdefs.IsUnavailable(err) {
		t.Errorf("checkpoint of a recovering sandbox = %v, want ErrRecovering", err)
	}
	removed := make(chan error, 1)
	go func() { removed <- m2.Remove(ctx, ids[1]) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		be.mu.Lock()
		n := be.attaching
		be.mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attaches waiting, want 4 (the worker bound)", n)
		}
	}
	select {
	case err := <-removed:
		t.Errorf("rm of a recovering sandbox did not wait for its recovery: %v", err)
	default:
	}
	close(be.attachGate)
	rep, err := r.Wait(ctx)
	if err != nil || len(rep.Adopted) != len(ids) {
		t.Fatalf("recovery = %+v, %v; want all %d adopted", rep, err, len(ids))
	}
	if err := <-removed; err != nil {
		t.Errorf("rm after its recovery: %v", err)
	}
	be.mu.Lock()
	peak := be.maxAttaching
	be.mu.Unlock()
	if peak > 4 || peak < 2 {
		t.Errorf("at most %d attaches at once, want between 2 and the bound 4", peak)
	}
	for _, id := range ids[2:] {
		if rec, _ := m2.Get(ctx, id); rec.State != Running {
			t.Errorf("%s is %s after recovery", id, rec.State)
		}
	}
	if _, err := m2.Checkpoint(ctx, ids[0], ""); err != nil {
		t.Errorf("checkpoint after recovery: %v", err)
	}
}

// TestRecoverInterrupted: a recovery stopped half-way (the daemon stopping) leaves the records
// it did not finish as they were, never Dead.
func TestRecoverInterrupted(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	rec, _ := m.Create(ctx, CreateOptions{})
	_ = m.Close()
	be.attachGate = make(chan struct{})
	m2, _ := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: m.cfg.ImageDir, Reseal: fakeReseal})
	rctx, cancel := context.WithCancel(ctx)
	r, err := m2.StartRecover(rctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	rep, _ := r.Wait(ctx)
	if len(rep.Interrupted) != 1 || len(rep.Dead) != 0 {
		t.Errorf("interrupted recovery = %+v", rep)
	}
	if got, _ := reg.GetSandbox(ctx, rec.ID); got.State != Running {
		t.Errorf("record after an interrupted recovery is %s, want running as it was", got.State)
	}
	m2.Close()
}

// rm of a fork child that the fork is still restoring is refused (409): the fork owns it and
// would mark it running after a removal (a tester saw "removed", then the fork hand out the
// id, then the record come back as dead). Once the fork has returned, rm works.
func TestRemoveRefusedWhileAForkMakesTheChild(t *testing.T) {
	ctx := context.Background()
	be := newFake()
	reg := NewMemRegistry()
	m := newTestManager(t, be, reg, fakeReseal)
	src, err := m.Create(ctx, CreateOptions{Name: "src"})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	be.mu.Lock()
	be.failRestore = func(Spec) error { close(started); <-release; return nil }
	be.mu.Unlock()
	done := make(chan ForkResult, 1)
	go func() {
		res, _ := m.Fork(ctx, src.ID, ForkOptions{N: 1, From: cp.ID})
		done <- res
	}()
	<-started
	recs, _ := m.List(ctx)
	var child SandboxRecord
	for _, r := range recs {
		if r.State == Restoring {
			child = r
		}
	}
	if child.ID == "" {
		t.Fatalf("no restoring child among %+v", recs)
	}
	if err := m.Remove(ctx, child.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("rm of a restoring fork child = %v, want a failed precondition", err)
	}
	close(release)
	res := <-done
	if len(res.Children) != 1 || res.Children[0].Err != nil || res.Children[0].Sandbox.ID != child.ID {
		t.Fatalf("fork after the refused rm: %+v", res)
	}
	if err := m.Remove(ctx, child.ID); err != nil {
		t.Fatalf("rm once the fork returned: %v", err)
	}
	if _, err := m.Get(ctx, child.ID); !errdefs.IsNotFound(err) {
		t.Errorf("the child's record after rm: %v", err)
	}
}

// A rootfs that contains, is, or lies inside the daemon's directories is refused before
// anything is made: with the state dir inside it, code in the sandbox read the secret key.
func TestRootfsMayNotOverlapTheDaemon(t *testing.T) {
	ctx := context.Background()
	top := t.TempDir()
	state := filepath.Join(top, "state")
	os.MkdirAll(filepath.Join(state, "sub"), 0o700)
	os.WriteFile(filepath.Join(state, "secret.key"), []byte("k"), 0o600)
	os.WriteFile(filepath.Join(state, "sub", "f"), []byte("x"), 0o600)
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "f"), []byte("x"), 0o600)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(top, link)
	be := newFake()
	m, err := NewManager(ManagerConfig{Backend: be, Registry: NewMemRegistry(), ImageDir: t.TempDir(), ProtectedDirs: []string{state}})
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{top, state, filepath.Join(state, "sub"), link} {
		_, err := m.Create(ctx, CreateOptions{RootfsDir: root})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "overlaps") {
			t.Errorf("rootfs %s = %v, want refused as overlapping %s", root, err, state)
		}
	}
	if be.creates != 0 {
		t.Errorf("%d instances made for refused rootfs", be.creates)
	}
	if _, err := m.Create(ctx, CreateOptions{RootfsDir: other}); err != nil {
		t.Errorf("an unrelated rootfs: %v", err)
	}
}

// A checkpoint removed while a fork verifies it reads as removed (not found), not corrupted.
func TestVerifyImageOfARemovedCheckpoint(t *testing.T) {
	ctx := context.Background()
	be, reg := newFake(), NewMemRegistry()
	m := newTestManager(t, be, reg, nil)
	src, _ := m.Create(ctx, CreateOptions{})
	cp, err := m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveCheckpoint(ctx, cp.ID); err != nil { // what a racing checkpoints rm does
		t.Fatal(err)
	}
	err = m.verifyImage(ctx, cp)
	var ce *CorruptImageError
	if !errdefs.IsNotFound(err) || errors.As(err, &ce) {
		t.Errorf("verifying a removed checkpoint = %v, want not found (not corrupted)", err)
	}
}
