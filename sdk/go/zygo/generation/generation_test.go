package generation

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// publish writes gen as zygo-guest does: identity.json first, then generation, each by rename.
func publish(t *testing.T, dir, gen string) {
	t.Helper()
	for _, f := range []struct{ name, data string }{
		{"identity.json", `{"sandbox_id":"sb-x","generation":"` + gen + `"}`},
		{"generation", gen},
	} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			t.Fatal(err)
		}
	}
}

type recorder struct {
	mu  sync.Mutex // guards evs
	evs []Event
}

func (r *recorder) add(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *recorder) get() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.evs...)
}

func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func TestBaselineThenOncePerGeneration(t *testing.T) {
	dir := t.TempDir()
	publish(t, dir, strings.Repeat("a", 32))
	var rec recorder
	w := New(Options{Dir: dir, Interval: 50 * time.Millisecond})
	w.OnNew(rec.add)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	time.Sleep(200 * time.Millisecond)
	if evs := rec.get(); len(evs) != 0 {
		t.Fatalf("the baseline generation called back: %+v", evs)
	}
	publish(t, dir, strings.Repeat("b", 32))
	if !waitFor(func() bool { return len(rec.get()) == 1 }) {
		t.Fatal("no callback for a new generation")
	}
	time.Sleep(300 * time.Millisecond)
	evs := rec.get()
	if len(evs) != 1 || evs[0].Generation != strings.Repeat("b", 32) || evs[0].Identity.SandboxID != "sb-x" {
		t.Fatalf("events %+v, want one for bbb… with its identity", evs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestInotifyWakesBeforeThePoll(t *testing.T) {
	dir := t.TempDir()
	publish(t, dir, strings.Repeat("a", 32))
	got := make(chan time.Time, 1)
	w := New(Options{Dir: dir, Interval: time.Minute})
	w.OnNew(func(Event) { got <- time.Now() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	publish(t, dir, strings.Repeat("c", 32))
	select {
	case at := <-got:
		t.Logf("callback %v after the rename (inotify)", at.Sub(t0))
	case <-time.After(5 * time.Second):
		t.Fatal("no callback within 5 s although the poll period is a minute: inotify did not wake the watcher")
	}
}

func TestCheckRunsPendingCallbacks(t *testing.T) {
	dir := t.TempDir()
	publish(t, dir, strings.Repeat("a", 32))
	var rec recorder
	w := New(Options{Dir: dir})
	w.OnNew(rec.add)
	if w.Check() {
		t.Error("Check reported a change for the baseline")
	}
	publish(t, dir, strings.Repeat("d", 32))
	if !w.Check() || w.Check() {
		t.Error("Check must report the new generation exactly once")
	}
	if len(rec.get()) != 1 {
		t.Errorf("callbacks ran %d times", len(rec.get()))
	}
}

func TestOutsideASandbox(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if _, err := Current(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Current outside a sandbox = %v, want fs.ErrNotExist", err)
	}
	if New(Options{Dir: dir}).Check() {
		t.Error("Check outside a sandbox reported a change")
	}
	if a, b := Seed(), Seed(); a == b {
		t.Error("Seed repeated itself")
	}
}
