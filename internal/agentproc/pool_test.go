package agentproc

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPreForkPoolTargetFollowsTraffic: the pre-fork pool keeps one child more than the
// peak of requests in flight in the current window (at least 2, at most the ceiling),
// forgets an old peak when the window turns, and empties after poolIdleAfter without a
// request; a ceiling of 0 is no pool at all.
func TestPreForkPoolTargetFollowsTraffic(t *testing.T) {
	if newPool(0) != nil {
		t.Fatal("newPool(0) made a pool")
	}
	var none *pool
	none.started()
	none.finished()
	if none.take(&Process{}) != nil {
		t.Fatal("a nil pool gave a child")
	}
	p := newPool(4)
	now := time.Now()
	if got := p.target(now); got != 2 {
		t.Errorf("target with no traffic: %d, want 2", got)
	}
	for range 3 {
		p.started()
	}
	if got := p.target(now); got != 4 {
		t.Errorf("target with 3 in flight: %d, want 4 (peak+1)", got)
	}
	for range 5 {
		p.started()
	}
	if got := p.target(now); got != 4 {
		t.Errorf("target with 8 in flight: %d, want the ceiling 4", got)
	}
	for range 8 {
		p.finished()
	}
	if got := p.target(now); got != 4 {
		t.Errorf("target right after the peak: %d, want 4 (the window's peak)", got)
	}
	if got := p.target(now.Add(poolWindow + time.Second)); got != 2 {
		t.Errorf("target once the window turned with nothing in flight: %d, want 2", got)
	}
	if got := p.target(now.Add(poolIdleAfter + time.Second)); got != 0 {
		t.Errorf("target after %v idle: %d, want 0", poolIdleAfter, got)
	}
}

// TestPreForkPoolSkipsDeadChildren: take never hands out a child that has exited while
// idle (its pidfd reads ready); it releases it (closing the pidfd it owns) and gives the
// next live one, or nil when none is left.
func TestPreForkPoolSkipsDeadChildren(t *testing.T) {
	spawn := func() (*exec.Cmd, int) {
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return cmd, fd
	}
	deadCmd, deadFd := spawn()
	_, liveFd := spawn()
	_ = deadCmd.Process.Kill()
	_ = deadCmd.Wait()
	p := newPool(2)
	dead, live := &child{seq: 1, pidfd: deadFd}, &child{seq: 2, pidfd: liveFd}
	p.ch <- dead
	p.ch <- live
	z := &Process{}
	if got := p.take(z); got != live {
		t.Fatalf("take gave %+v, want the live child (seq 2)", got)
	}
	if dead.pidfd != -1 {
		t.Errorf("the dead child's pidfd %d was not released", dead.pidfd)
	}
	if got := p.take(z); got != nil {
		t.Errorf("take of an empty pool gave %+v", got)
	}
	unix.Close(liveFd)
}
