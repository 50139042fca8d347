package gvisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zygo-run/zygo/internal/errdefs"
	"github.com/zygo-run/zygo/internal/sandbox"
	"github.com/zygo-run/zygo/internal/sandbox/gvisor"
)

// TestManagerRemoveFrozen: a sandbox whose engine stopped answering (its runsc-sandbox
// process SIGSTOPped): a checkpoint (what pause and fork take) fails at ReadyTimeout with a
// deadline error saying the engine did not answer, and rm still ends it: the call returns,
// the processes are gone (even the stopped one) and so are the record and the instance.
func TestManagerRemoveFrozen(t *testing.T) {
	h, _ := newHarnessTimeout(t, nil, 15*time.Second)
	ctx := tctx(t)
	src, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := gvisor.RunscForTest(h.be, ctx, "state", src.EngineID)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.PID <= 1 {
		t.Fatalf("runsc state %s: pid %d, %v", src.EngineID, st.PID, err)
	}
	if err := syscall.Kill(st.PID, syscall.SIGSTOP); err != nil {
		t.Fatalf("freezing runsc-sandbox %d: %v", st.PID, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(st.PID, syscall.SIGKILL) })
	_, err = h.m.Checkpoint(ctx, src.ID, "frozen")
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("checkpoint of a frozen sandbox = %v, want a deadline error saying the engine did not answer", err)
	}
	t0 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := h.m.Remove(rctx, src.ID); err != nil {
		t.Fatalf("rm of a frozen sandbox: %v", err)
	}
	t.Logf("rm of a frozen sandbox returned in %s", time.Since(t0).Round(time.Millisecond))
	if stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(st.PID), "stat")); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Errorf("runsc-sandbox %d still runs after rm: %s", st.PID, stat)
	}
	if _, err := h.m.Get(ctx, src.ID); !errdefs.IsNotFound(err) {
		t.Errorf("record after rm: %v", err)
	}
	if ids, _ := h.be.List(ctx); len(ids) != 0 {
		t.Errorf("engine instances after rm: %v", ids)
	}
	if dirs := h.be.CgroupDirs(src.EngineID); len(dirs) != 0 {
		t.Errorf("cgroup after rm: %v", dirs)
	}
}

// TestManagerPauseImagesEnd: pause images never outlive their need. Paused twice (resumed
// in between), a sandbox keeps one image; rm removes it. Paused, resumed and then removed (as
// the expiry loop does on a kill timeout), it leaves no image either; a checkpoint taken on
// purpose stays.
func TestManagerPauseImagesEnd(t *testing.T) {
	h := newHarness(t, nil)
	ctx := tctx(t)
	images := filepath.Join(h.dir, "images")
	count := func(id string) (cps, dirs int) {
		all, _ := h.m.Checkpoints(ctx, "")
		for _, cp := range all {
			if cp.SandboxID == id {
				cps++
			}
		}
		ents, _ := os.ReadDir(images)
		return cps, len(ents)
	}
	a, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := h.m.Pause(ctx, a.ID); err != nil {
			t.Fatalf("pause %d: %v", i+1, err)
		}
		if cps, dirs := count(a.ID); cps != 1 || dirs != 1 {
			t.Errorf("after pause %d: %d checkpoints, %d image dirs, want 1 and 1", i+1, cps, dirs)
		}
		if i == 0 {
			if _, err := h.m.Resume(ctx, a.ID, 0); err != nil {
				t.Fatalf("resume: %v", err)
			}
		}
	}
	if err := h.m.Remove(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if cps, dirs := count(a.ID); cps != 0 || dirs != 0 {
		t.Errorf("after rm of a sandbox paused twice: %d checkpoints, %d image dirs, want none", cps, dirs)
	}

	b, err := h.m.Create(ctx, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := h.m.Checkpoint(ctx, b.ID, "mine")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Pause(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Resume(ctx, b.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Remove(ctx, b.ID); err != nil { // what the expiry loop does on a kill timeout
		t.Fatal(err)
	}
	if cps, dirs := count(b.ID); cps != 1 || dirs != 1 {
		t.Errorf("after resume then rm: %d checkpoints, %d image dirs, want only %s", cps, dirs, kept.ID)
	}
	if _, err := h.m.GetCheckpoint(ctx, kept.ID); err != nil {
		t.Errorf("the checkpoint taken on purpose: %v", err)
	}
}
