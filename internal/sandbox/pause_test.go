package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
)

// clock is a settable clock for the Manager's Now.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClockManager(t *testing.T, be Backend, reg Registry) (*Manager, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	m, err := NewManager(ManagerConfig{Backend: be, Registry: reg, ImageDir: t.TempDir(), Reseal: fakeReseal, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	be := newFake()
	m, _ := newClockManager(t, be, NewMemRegistry())
	src, err := m.Create(ctx, CreateOptions{Lifecycle: Lifecycle{Timeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Pause(ctx, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != Paused || p.CheckpointID == "" || !p.Options.Lifecycle.ExpiresAt.IsZero() || be.isRunning(src.EngineID) {
		t.Fatalf("paused: %+v, engine running %v", p, be.isRunning(src.EngineID))
	}
	if _, err := m.Pause(ctx, src.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("second pause: %v, want failed precondition", err)
	}
	if _, err := m.Checkpoint(ctx, src.ID, ""); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("checkpoint of a paused sandbox: %v", err)
	}
	if err := m.RemoveCheckpoint(ctx, p.CheckpointID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("removing the pause image of a paused sandbox: %v, want refused", err)
	}

	be.failRestore = func(Spec) error { return errors.New("injected") }
	if _, err := m.Resume(ctx, src.ID, 0); err == nil {
		t.Fatal("a failed resume returned nil")
	}
	if rec, _ := m.Get(ctx, src.ID); rec.State != Paused {
		t.Errorf("after a failed resume: %s, want paused", rec.State)
	}
	be.failRestore = nil
	r, err := m.Resume(ctx, src.ID, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != src.ID || r.State != Running || r.EngineID == src.EngineID || r.Generation == src.Generation ||
		!be.isRunning(r.EngineID) || r.Options.Lifecycle.Timeout != 2*time.Hour || r.Options.Lifecycle.ExpiresAt.IsZero() {
		t.Errorf("resumed: %+v", r)
	}
	if _, err := m.Resume(ctx, src.ID, 0); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("resume of a running sandbox: %v", err)
	}
	if _, err := m.Checkpoint(ctx, src.ID, ""); err != nil {
		t.Errorf("checkpoint after resume: %v", err)
	}
	if _, err := m.Pause(ctx, "sb-0000000000000000"); !errdefs.IsNotFound(err) {
		t.Errorf("pause of an unknown sandbox: %v", err)
	}
	// rm of a paused sandbox.
	if _, err := m.Pause(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, src.ID); err != nil {
		t.Fatalf("rm of a paused sandbox: %v", err)
	}
}

func TestRestoreOutlivesItsSandbox(t *testing.T) {
	ctx := context.Background()
	be := newFake()
	m, _ := newClockManager(t, be, NewMemRegistry())
	src, _ := m.Create(ctx, CreateOptions{Name: "agent", Metadata: map[string]string{"a": "1"}})
	cp, err := m.Checkpoint(ctx, src.ID, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	rec, err := m.Restore(ctx, "keep", RestoreOptions{Lifecycle: Lifecycle{Timeout: time.Minute, OnTimeout: OnTimeoutPause}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == src.ID || rec.State != Running || rec.ParentID != src.ID || rec.CheckpointID != cp.ID ||
		rec.Options.Metadata["a"] != "1" || rec.Options.Lifecycle.ExpiresAt.IsZero() || !be.isRunning(rec.EngineID) {
		t.Errorf("restored: %+v", rec)
	}
	if _, err := m.Restore(ctx, "nope", RestoreOptions{}); !errdefs.IsNotFound(err) {
		t.Errorf("restore of an unknown checkpoint: %v", err)
	}
	if _, err := m.Restore(ctx, cp.ID, RestoreOptions{Lifecycle: Lifecycle{OnTimeout: "explode"}}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("restore with on_timeout explode: %v", err)
	}
}

func TestTimeouts(t *testing.T) {
	ctx := context.Background()
	be := newFake()
	m, c := newClockManager(t, be, NewMemRegistry())
	kill, _ := m.Create(ctx, CreateOptions{Lifecycle: Lifecycle{Timeout: time.Minute}})
	pause, _ := m.Create(ctx, CreateOptions{Lifecycle: Lifecycle{Timeout: time.Minute, OnTimeout: OnTimeoutPause}})
	moved, _ := m.Create(ctx, CreateOptions{Lifecycle: Lifecycle{Timeout: time.Minute}})
	never, _ := m.Create(ctx, CreateOptions{})
	if want := c.now().Add(time.Minute); !kill.Options.Lifecycle.ExpiresAt.Equal(want) {
		t.Errorf("expires %v, want %v", kill.Options.Lifecycle.ExpiresAt, want)
	}
	c.add(30 * time.Second)
	rec, err := m.SetTimeout(ctx, moved.ID, 10*time.Minute, "")
	if err != nil || !rec.Options.Lifecycle.ExpiresAt.Equal(c.now().Add(10*time.Minute)) {
		t.Fatalf("SetTimeout: %v %+v", err, rec.Options.Lifecycle)
	}
	if _, err := m.SetTimeout(ctx, moved.ID, -time.Second, ""); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a negative timeout: %v", err)
	}
	m.expireDue(ctx)
	if _, err := m.Get(ctx, kill.ID); err != nil {
		t.Fatalf("expired early: %v", err)
	}
	c.add(31 * time.Second)
	m.expireDue(ctx)
	if _, err := m.Get(ctx, kill.ID); !errdefs.IsNotFound(err) {
		t.Errorf("past its timeout (kill): %v, want removed", err)
	}
	if r, _ := m.Get(ctx, pause.ID); r.State != Paused {
		t.Errorf("past its timeout (pause): %s", r.State)
	}
	for _, id := range []string{moved.ID, never.ID} {
		if r, _ := m.Get(ctx, id); r.State != Running {
			t.Errorf("%s: %s, want running", id, r.State)
		}
	}
	if _, err := m.SetTimeout(ctx, pause.ID, time.Minute, ""); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("SetTimeout of a paused sandbox: %v", err)
	}
}

func TestRecoverPausedAndResuming(t *testing.T) {
	ctx := context.Background()
	be := newFake()
	reg := NewMemRegistry()
	m, _ := newClockManager(t, be, reg)
	a, _ := m.Create(ctx, CreateOptions{})
	b, _ := m.Create(ctx, CreateOptions{})
	if _, err := m.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	rb, _ := reg.GetSandbox(ctx, b.ID)
	rb.State = Resuming // a daemon that stopped mid-resume
	if err := reg.PutSandbox(ctx, rb); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	m2, _ := newClockManager(t, be, reg)
	if _, err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if r, _ := m2.Get(ctx, id); r.State != Paused {
			t.Errorf("%s after recovery: %s, want paused", id, r.State)
		}
		if _, err := m2.Resume(ctx, id, 0); err != nil {
			t.Errorf("resume after recovery: %v", err)
		}
	}
}

func TestLifecycleValidation(t *testing.T) {
	ctx := context.Background()
	m, _ := newClockManager(t, newFake(), NewMemRegistry())
	for _, o := range []CreateOptions{
		{Lifecycle: Lifecycle{Timeout: -time.Second}},
		{Lifecycle: Lifecycle{Timeout: MaxTimeout + time.Second}},
		{Lifecycle: Lifecycle{OnTimeout: "explode"}},
		{Metadata: map[string]string{"": "x"}},
		{Template: "base", RootfsDir: "/srv"},
	} {
		if _, err := m.Create(ctx, o); !errdefs.IsInvalidArgument(err) {
			t.Errorf("create %+v: %v, want invalid argument", o, err)
		}
	}
	if _, err := m.Create(ctx, CreateOptions{Template: "nope"}); !errdefs.IsNotFound(err) {
		t.Errorf("an unknown template: %v, want not found", err)
	}
	if got := m.Templates(); len(got) != 2 || got[0].Name != BaseTemplate || got[1].Name != CodeInterpreterTemplate {
		t.Errorf("templates: %+v", got)
	}
}

// TestResumeConcurrent: a Resume that finds another resuming the sandbox waits for it and
// answers as it did (E2B's connect is idempotent), rather than failing.
func TestResumeConcurrent(t *testing.T) {
	ctx := context.Background()
	be := newFake()
	m, _ := newClockManager(t, be, NewMemRegistry())
	src, err := m.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	restores := 0 // under be.mu, which Restore does not hold while calling failRestore
	be.mu.Lock()
	be.failRestore = func(Spec) error {
		be.mu.Lock()
		restores++
		be.mu.Unlock()
		once.Do(func() { close(entered) })
		<-release
		return nil
	}
	be.mu.Unlock()
	type result struct {
		rec SandboxRecord
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() { r, err := m.Resume(ctx, src.ID, 0); first <- result{r, err} }()
	<-entered
	go func() { r, err := m.Resume(ctx, src.ID, 0); second <- result{r, err} }()
	time.Sleep(200 * time.Millisecond) // lets the second call reach the wait (ordering only)
	close(release)
	a, b := <-first, <-second
	if a.err != nil || b.err != nil {
		t.Fatalf("concurrent resumes: %v, %v; want both to succeed", a.err, b.err)
	}
	if a.rec.State != Running || b.rec.Generation != a.rec.Generation || b.rec.EngineID != a.rec.EngineID {
		t.Errorf("the waiting resume answered %+v, want the first's %+v", b.rec, a.rec)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if restores != 1 {
		t.Errorf("restores: %d, want 1 (the waiting call restores nothing)", restores)
	}
}
