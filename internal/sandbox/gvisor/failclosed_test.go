package gvisor_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
)

// stateLog is a Registry that remembers every state each sandbox record was put in.
type stateLog struct {
	*sandbox.MemRegistry
	mu     sync.Mutex // guards states
	states map[string][]sandbox.State
}

func (r *stateLog) PutSandbox(ctx context.Context, rec sandbox.SandboxRecord) error {
	r.mu.Lock()
	r.states[rec.ID] = append(r.states[rec.ID], rec.State)
	r.mu.Unlock()
	return r.MemRegistry.PutSandbox(ctx, rec)
}

func (r *stateLog) of(id string) []sandbox.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states[id])
}

// newHarnessTimeout is newHarness on a stateLog registry with the given ReadyTimeout.
func newHarnessTimeout(t *testing.T, reseal sandbox.ResealFunc, ready time.Duration) (*harness, *stateLog) {
	log := &stateLog{MemRegistry: sandbox.NewMemRegistry(), states: map[string][]sandbox.State{}}
	h := &harness{dir: stateDir(t), reg: log.MemRegistry}
	h.be = newBackend(t, filepath.Join(h.dir, "engine"))
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: h.be, Registry: log,
		ImageDir: filepath.Join(h.dir, "images"), Reseal: reseal, ReadyTimeout: ready})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	t.Cleanup(func() { h.removeAll(t) })
	return h, log
}

// checkGone fails the test unless nothing of the copy whose reseal failed is left: it never
// was Running, and it has no record, no engine instance, no instance dir and no mount (its
// engine ids all start with "ID-").
func checkGone(t *testing.T, h *harness, log *stateLog, id string) {
	t.Helper()
	if st := log.of(id); slices.Contains(st, sandbox.Running) || len(st) == 0 {
		t.Errorf("%s went through states %v; want some, never running", id, st)
	}
	if _, err := h.m.Get(tctx(t), id); err == nil {
		t.Errorf("%s still has a record", id)
	}
	prefix := id + "-"
	ids, _ := h.be.List(tctx(t))
	ents, _ := os.ReadDir(filepath.Join(h.dir, "engine", "instances"))
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	for _, e := range ids {
		if strings.HasPrefix(e, prefix) {
			t.Errorf("engine instance or instance dir %s is left", e)
		}
	}
	if mounts, _ := os.ReadFile("/proc/self/mounts"); bytes.Contains(mounts, []byte(prefix)) {
		t.Errorf("a mount of %s is left", id)
	}
}

// TestResealFailsClosedRealGuest injects faults into real guests. (1) A child's guest is
// paused before its reseal, so it never acknowledges: after ReadyTimeout the child is
// destroyed, never Running, and its error names the cause; its sibling runs. (2) A step fails
// inside the guest (a restart service's binary is gone): the fork child is destroyed, and a
// rollback to that checkpoint fails and leaves the sandbox as it was.
func TestResealFailsClosedRealGuest(t *testing.T) {
	var mu sync.Mutex // guards paused
	var paused []string
	var be *gvisor.Backend
	reseal := func(ctx context.Context, tg sandbox.ResealTarget) (guest.ResealResult, error) {
		mu.Lock()
		first := len(paused) == 0 && tg.Sandbox.ParentID != ""
		if first {
			paused = append(paused, tg.Sandbox.ID)
		}
		mu.Unlock()
		if first { // the engine instance id is the copy's hostname
			if out, err := gvisor.RunscForTest(be, ctx, "pause", tg.Hostname); err != nil {
				t.Errorf("pausing %s: %v\n%s", tg.Hostname, err, out)
			}
		}
		return sandbox.DefaultReseal(ctx, tg)
	}
	h, log := newHarnessTimeout(t, reseal, 5*time.Second)
	be = h.be
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{Name: "src", Services: []guest.Service{
		{Name: "svc", OnFork: guest.OnForkRestart, Argv: []string{"/tmp/svc"}}}})
	if err != nil {
		t.Fatal(err)
	}
	h.sh(t, src.ID, "printf '#!/bin/sh\\nexec sleep 100000\\n' > /tmp/svc && chmod +x /tmp/svc")

	// (1) The guest does not acknowledge.
	t0 := time.Now()
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 2})
	if err != nil {
		t.Fatalf("Fork: %v (one child should run)", err)
	}
	var failed, ok []sandbox.ForkChild
	for _, c := range res.Children {
		if c.Err != nil {
			failed = append(failed, c)
		} else {
			ok = append(ok, c)
		}
	}
	if len(failed) != 1 || len(ok) != 1 {
		t.Fatalf("fork with one paused guest: %d failed, %d running; want 1 and 1", len(failed), len(ok))
	}
	if !strings.Contains(failed[0].Error, paused[0]) || !strings.Contains(failed[0].Error, "deadline exceeded") {
		t.Errorf("the failed child's error does not name it and the timeout: %q", failed[0].Error)
	}
	t.Logf("unacknowledged reseal failed after %v: %s", time.Since(t0).Round(time.Millisecond), failed[0].Error)
	checkGone(t, h, log, paused[0])
	h.sh(t, ok[0].Sandbox.ID, "true") // the sibling is usable

	checkGuestStepFails(t, h, log, src.ID, ok[0].Sandbox.ID)
}

// checkGuestStepFails makes a reseal step fail inside the guest (the restart service's binary
// is gone): a fork child is destroyed with the cause, and a rollback fails and leaves src as it
// was. keep is a sandbox that must survive.
func checkGuestStepFails(t *testing.T, h *harness, log *stateLog, srcID, keep string) {
	ctx := tctx(t)
	src, _ := h.m.Get(ctx, srcID)
	h.sh(t, src.ID, "rm /tmp/svc")
	cp, err := h.m.Checkpoint(ctx, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.m.Fork(ctx, src.ID, sandbox.ForkOptions{N: 1, From: cp.ID})
	if err == nil || len(res.Children) != 1 || res.Children[0].Err == nil {
		t.Fatalf("fork with a failing service restart = %+v, %v; want the child failed", res, err)
	}
	if msg := res.Children[0].Error; !strings.Contains(msg, `restarting service "svc"`) {
		t.Errorf("the cause is not reported: %q", msg)
	}
	for _, id := range log.ids() {
		if id != src.ID && id != keep {
			checkGone(t, h, log, id)
		}
	}
	before, _ := h.m.Get(ctx, src.ID)
	if _, err := h.m.Rollback(ctx, src.ID, cp.ID); err == nil || !strings.Contains(err.Error(), `restarting service "svc"`) {
		t.Errorf("rollback with a failing service restart = %v, want the cause", err)
	}
	after, _ := h.m.Get(ctx, src.ID)
	if after.State != sandbox.Running || after.EngineID != before.EngineID || after.Generation != before.Generation {
		t.Errorf("after a failed rollback the source is %s on %s gen %s; want running as before (%s, %s)",
			after.State, after.EngineID, after.Generation, before.EngineID, before.Generation)
	}
	h.sh(t, src.ID, "true")
	if ids, _ := h.be.List(ctx); len(ids) != 2 {
		t.Errorf("engine instances %v, want only the source and the good child", ids)
	}
}

func (r *stateLog) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id := range r.states {
		out = append(out, id)
	}
	return out
}

// A copy whose wall clock is off by more than guest.ClockTolerance and cannot be set is not
// handed out. The host claims to be an hour ahead; the guest's clock_settime is refused in
// gVisor (its wall clock is the host's, and PID 1 holds no CAP_SYS_TIME), so the reseal fails
// with the clock named and the child is destroyed.
func TestResealFailsClosedOnAClockItCannotSet(t *testing.T) {
	skewed := func(ctx context.Context, tg sandbox.ResealTarget) (guest.ResealResult, error) {
		req, err := sandbox.NewResealRequest(tg, tg.Secrets)
		if err != nil {
			return guest.ResealResult{}, err
		}
		req.HostTime = req.HostTime.Add(time.Hour)
		return sandbox.SendReseal(ctx, tg, req)
	}
	h, log := newHarnessTimeout(t, skewed, 30*time.Second)
	src, err := h.m.Create(tctx(t), sandbox.CreateOptions{Name: "clock"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.m.Fork(tctx(t), src.ID, sandbox.ForkOptions{N: 1})
	if err == nil || !strings.Contains(err.Error(), "wall clock is off") {
		t.Fatalf("fork with a clock the guest cannot set = %v, want the clock named", err)
	}
	log.mu.Lock()
	var kids []string
	for id := range log.states {
		if id != src.ID {
			kids = append(kids, id)
		}
	}
	log.mu.Unlock()
	if len(kids) != 1 {
		t.Fatalf("want one child record ever made, got %v", kids)
	}
	checkGone(t, h, log, kids[0])
}

// A checkpoint whose guest never dials back is bounded by ReadyTimeout, not by the caller's
// patience, and leaves no image and no record.
func TestCheckpointBoundedWhenTheGuestDoesNotReturn(t *testing.T) {
	h, _ := newHarnessTimeout(t, sandbox.DefaultReseal, 3*time.Second)
	src, err := h.m.Create(tctx(t), sandbox.CreateOptions{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := gvisor.StopListeningForTest(h.be, src.EngineID); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = h.m.Checkpoint(tctx(t), src.ID, "never")
	took := time.Since(t0)
	if err == nil {
		t.Fatal("checkpoint of a sandbox whose guest cannot reconnect succeeded")
	}
	if took > 30*time.Second {
		t.Errorf("checkpoint took %v with a ReadyTimeout of 3s", took)
	}
	if cps, _ := h.m.Checkpoints(tctx(t), src.ID); len(cps) != 0 {
		t.Errorf("checkpoint records left: %+v", cps)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.dir, "images")); len(ents) != 0 {
		t.Errorf("image dirs left: %v", ents)
	}
	t.Logf("checkpoint failed after %v: %v", took.Round(time.Millisecond), err)
}

// The out-of-band generation check reads what the sandbox put at /run/zygo/generation, which
// can be anything: a symlink to /dev/zero fails the check at once with a short error instead
// of filling the daemon's memory and log (a tester grew the daemon to 4.9 GB with a 600 MB
// file). A copy whose file lies is destroyed, as before.
func TestGenerationCheckIsBounded(t *testing.T) {
	h, _ := newHarnessTimeout(t, sandbox.DefaultReseal, 20*time.Second)
	src, err := h.m.Create(tctx(t), sandbox.CreateOptions{Name: "liar"})
	if err != nil {
		t.Fatal(err)
	}
	h.sh(t, src.ID, "ln -sf /dev/zero /run/zygo/.g && mv -f /run/zygo/.g /run/zygo/generation")
	t0 := time.Now()
	got, err := h.be.ReadGeneration(tctx(t), src.EngineID)
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("reading an endless generation = %d bytes, %v; want an error", len(got), err)
	}
	if len(err.Error()) > 4<<10 {
		t.Errorf("the error is %d bytes long", len(err.Error()))
	}
	t.Logf("refused after %v: %v", time.Since(t0).Round(time.Millisecond), err)
}
