package agentproc

import (
	"context"
	"errors"
	"fmt"
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

// fakeHeld records what is done with a Held.
type fakeHeld struct {
	begun, dropped []string
	fail           error
}

func (h *fakeHeld) Begin(_ context.Context, id string) (func(*Result), error) {
	h.begun = append(h.begun, id)
	if h.fail != nil {
		return nil, h.fail
	}
	return func(*Result) { h.begun = append(h.begun, "after "+id) }, nil
}

func (h *fakeHeld) Drop(<-chan struct{}) { h.dropped = append(h.dropped, "drop") }

// TestHeldChildIsBegunBeforeItsHook: a child readied by Spec.Hold is begun, with its
// request's id, before the request's BeforeGo, which is told so (held) and so places
// nothing; their afters run once, the hook's first; a failed Begin fails the request
// without running BeforeGo; a child released unbegun drops what was held, and a begun one
// does not drop it again.
func TestHeldChildIsBegunBeforeItsHook(t *testing.T) {
	var order []string
	req := Request{ID: "r-1", BeforeGo: func(_ context.Context, _ int, held bool) (func(*Result), error) {
		order = append(order, fmt.Sprintf("before_go held=%v", held))
		return func(*Result) { order = append(order, "after before_go") }, nil
	}}
	h := &fakeHeld{}
	c := &child{held: h, pidfd: -1}
	after, err := prepare(t.Context(), req, c)
	if err != nil {
		t.Fatal(err)
	}
	if c.held != nil {
		t.Error("the child still holds its Held after prepare: release would drop it again")
	}
	if len(h.begun) != 1 || h.begun[0] != "r-1" || len(order) != 1 || order[0] != "before_go held=true" {
		t.Fatalf("begun %v, hook %v: want Begin(r-1) then the hook told held=true", h.begun, order)
	}
	after(&Result{})
	if len(order) != 2 || order[1] != "after before_go" || len(h.begun) != 2 || h.begun[1] != "after r-1" {
		t.Errorf("afters: hook %v, held %v", order, h.begun)
	}
	(&Process{forks: map[int]chan message{}, exits: map[int]chan message{}}).release(c)
	if len(h.dropped) != 0 {
		t.Errorf("a begun Held was dropped at release: %v", h.dropped)
	}

	order = nil
	failing := &fakeHeld{fail: errors.New("no counter")}
	if _, err := prepare(t.Context(), req, &child{held: failing, pidfd: -1}); err == nil || len(order) != 0 {
		t.Errorf("failed Begin: err %v, hook ran %v; want the error and no hook", err, order)
	}
	if _, err := prepare(t.Context(), req, &child{pidfd: -1}); err != nil || len(order) != 1 || order[0] != "before_go held=false" {
		t.Errorf("child without Held: err %v, hook %v; want the hook told held=false", err, order)
	}

	idle := &fakeHeld{}
	(&Process{forks: map[int]chan message{}, exits: map[int]chan message{}}).release(&child{held: idle, pidfd: -1})
	if len(idle.dropped) != 1 || len(idle.begun) != 0 {
		t.Errorf("an idle child released: begun %v, dropped %v; want one drop", idle.begun, idle.dropped)
	}
}
