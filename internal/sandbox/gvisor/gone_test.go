package gvisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/guest"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
)

// notHung bounds waits that only check a call did not hang (never a timing target).
const notHung = 30 * time.Second

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// startExec runs script in sandbox id in the background and returns once it has printed its
// first output; the channel receives Exec's result.
func startExec(t *testing.T, m *sandbox.Manager, ctx context.Context, id, script string) <-chan error {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	out := writerFunc(func(p []byte) (int, error) { once.Do(func() { close(started) }); return len(p), nil })
	done := make(chan error, 1)
	go func() {
		st, err := m.Exec(ctx, id, guest.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, out, nil)
		if err == nil && st.Code != 0 {
			err = errors.New("exit status " + strconv.Itoa(st.Code))
		}
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("exec %q ended before it started: %v", script, err)
	case <-time.After(notHung):
		t.Fatalf("exec %q did not start", script)
	}
	return done
}

func waitErr(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(notHung):
		t.Fatalf("%s is still in flight", what)
		return nil
	}
}

// newBusyHarness is newHarness with the given BusyWait.
func newBusyHarness(t *testing.T, busy time.Duration) *harness {
	h := &harness{dir: stateDir(t), reg: sandbox.NewMemRegistry()}
	h.be = newBackend(t, filepath.Join(h.dir, "engine"))
	m, err := sandbox.NewManager(sandbox.ManagerConfig{Backend: h.be, Registry: h.reg,
		ImageDir: filepath.Join(h.dir, "images"), ReadyTimeout: 30 * time.Second, BusyWait: busy})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	t.Cleanup(func() { h.removeAll(t) })
	return h
}

// TestManagerRemoveDuringExec: rm of a sandbox running `sleep 600` does not wait for it: the
// exec ends with ErrRemoved, rm returns, and nothing of the sandbox is left.
func TestManagerRemoveDuringExec(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exec := startExec(t, h.m, ctx, src.ID, "echo up; exec sleep 600")
	t0 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, notHung)
	defer cancel()
	if err := h.m.Remove(rctx, src.ID); err != nil {
		t.Fatalf("rm during an exec: %v", err)
	}
	t.Logf("rm during exec -- sleep 600 returned in %s", time.Since(t0).Round(time.Millisecond))
	if err := waitErr(t, "the exec after rm", exec); !errors.Is(err, sandbox.ErrRemoved) || !errdefs.IsNotFound(err) {
		t.Errorf("the exec cut off by rm = %v, want ErrRemoved", err)
	}
	if _, err := h.m.Get(ctx, src.ID); !errdefs.IsNotFound(err) {
		t.Errorf("record after rm: %v", err)
	}
	if ids, _ := h.be.List(ctx); len(ids) != 0 {
		t.Errorf("engine instances after rm: %v", ids)
	}
}

// TestManagerCheckpointBusy: a checkpoint waits for an exec in flight that ends within
// BusyWait (the exec completes, the checkpoint follows); behind one that does not, it fails
// with ErrFailedPrecondition saying calls are in flight, leaves no image or record, and the
// exec runs on unharmed.
func TestManagerCheckpointBusy(t *testing.T) {
	h := newBusyHarness(t, 4*time.Second)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	short := startExec(t, h.m, ctx, src.ID, "echo up; sleep 0.5; echo done > /tmp/short")
	if _, err := h.m.Checkpoint(ctx, src.ID, "after-short"); err != nil {
		t.Errorf("checkpoint behind a short exec: %v", err)
	}
	if err := waitErr(t, "the short exec", short); err != nil {
		t.Errorf("the short exec the checkpoint waited for: %v", err)
	}
	if got := h.file(t, src.ID, "/tmp/short"); got != "done\n" {
		t.Errorf("the short exec did not finish: /tmp/short = %q", got)
	}

	lctx, stopLong := context.WithCancel(ctx)
	defer stopLong()
	long := startExec(t, h.m, lctx, src.ID, "echo up; exec sleep 600")
	_, err = h.m.Checkpoint(ctx, src.ID, "busy")
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("checkpoint behind sleep 600 = %v, want ErrFailedPrecondition naming the calls in flight", err)
	}
	if cps, _ := h.m.Checkpoints(ctx, src.ID); len(cps) != 1 {
		t.Errorf("checkpoints after the refused one: %d, want 1", len(cps))
	}
	if ents, _ := os.ReadDir(filepath.Join(h.dir, "images")); len(ents) != 1 {
		t.Errorf("image dirs after the refused checkpoint: %d, want 1", len(ents))
	}
	select {
	case err := <-long:
		t.Errorf("the long exec ended when the checkpoint gave up: %v", err)
	default:
	}
	h.sh(t, src.ID, "true") // new calls go in again once the checkpoint gave up
	stopLong()
	waitErr(t, "the cancelled long exec", long)
}

// engineProcesses returns the pids of the runsc processes (sandbox and gofer) of engine id.
func engineProcesses(t *testing.T, id string) []int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmd), "\x00")
		if len(args) > 0 && strings.HasPrefix(args[0], "runsc-") && strings.Contains(string(cmd), "\x00"+id+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitState polls the sandbox's record until it is in state want (bounded: it did not hang).
func waitState(t *testing.T, h *harness, id string, want sandbox.State) sandbox.SandboxRecord {
	t.Helper()
	deadline := time.Now().Add(notHung)
	for {
		rec, err := h.m.Get(tctx(t), id)
		if err == nil && rec.State == want {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s (%v), still not %s", id, rec.State, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestManagerEngineDies: the runsc processes of one sandbox are SIGKILLed, and the PID 1 of
// another is killed through runsc. Each is marked dead with a cause while the daemon runs,
// its exec in flight ends with ErrDead, new calls fail at once, rm cleans it up; a third
// sandbox is untouched.
func TestManagerEngineDies(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	var recs []sandbox.SandboxRecord
	for _, name := range []string{"killed", "init-gone", "bystander"} {
		rec, err := h.m.Create(ctx, sandbox.CreateOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	killed, initGone, bystander := recs[0], recs[1], recs[2]
	exec := startExec(t, h.m, ctx, killed.ID, "echo up; exec sleep 600")
	pids := engineProcesses(t, killed.EngineID)
	if len(pids) < 2 {
		t.Fatalf("found runsc processes %v of %s, want the sandbox and the gofer", pids, killed.EngineID)
	}
	t0 := time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing %d: %v", pid, err)
		}
	}
	if _, err := gvisor.RunscForTest(h.be, ctx, "kill", initGone.EngineID, "KILL"); err != nil {
		t.Fatalf("killing PID 1 of %s: %v", initGone.EngineID, err)
	}
	for _, rec := range []sandbox.SandboxRecord{killed, initGone} {
		dead := waitState(t, h, rec.ID, sandbox.Dead)
		t.Logf("%s marked dead %s after the kill: %s", rec.Name, time.Since(t0).Round(time.Millisecond), dead.Error)
		if !strings.Contains(dead.Error, "exited") {
			t.Errorf("%s: cause %q, want the engine's exit", rec.Name, dead.Error)
		}
		t1 := time.Now()
		_, err := h.m.Exec(ctx, rec.ID, guest.ExecRequest{Argv: []string{"true"}}, nil, nil)
		if !errors.Is(err, sandbox.ErrDead) || !errdefs.IsFailedPrecondition(err) {
			t.Errorf("%s: exec in a dead sandbox = %v, want ErrDead", rec.Name, err)
		}
		if el := time.Since(t1); el > 5*time.Second {
			t.Errorf("%s: exec in a dead sandbox took %s to fail", rec.Name, el)
		}
	}
	if err := waitErr(t, "the exec whose engine was killed", exec); !errors.Is(err, sandbox.ErrDead) {
		t.Errorf("the exec in flight when the engine died = %v, want ErrDead", err)
	}
	h.sh(t, bystander.ID, "true")
	if rec, _ := h.m.Get(ctx, bystander.ID); rec.State != sandbox.Running {
		t.Errorf("bystander is %s", rec.State)
	}
	for _, rec := range []sandbox.SandboxRecord{killed, initGone} {
		if err := h.m.Remove(ctx, rec.ID); err != nil {
			t.Errorf("rm of dead %s: %v", rec.Name, err)
		}
		if _, err := os.Stat(h.be.InstanceDir(rec.EngineID)); !os.IsNotExist(err) {
			t.Errorf("instance dir of %s left after rm: %v", rec.Name, err)
		}
	}
	if ids, _ := h.be.List(ctx); len(ids) != 1 || ids[0] != bystander.EngineID {
		t.Errorf("engine instances after rm: %v, want only the bystander", ids)
	}
}
