package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	zygov1 "github.com/zygo-run/zygo/internal/kube/api/zygo/v1alpha1"
)

// A SandboxFork's fork outside the reconcile workers, as sandboxcreate.go does for creates.
//
// A fork call takes up to createTimeout; a cross-node fork copies an image for up to
// CopyTimeout (15 min) first. Run inside a reconcile, a few of them would hold every
// SandboxFork worker and stall every namespace's forks. So the reconcile starts the fork as a
// forkOp, a goroutine of its own (detached from the reconcile, bounded by forkOpTimeout) working
// on a copy of the SandboxFork, and waits for it at most createInlineWait: a quick fork is
// recorded in the same pass; a slow one leaves the worker (a cross-node copy shows
// Complete=False reason Copying, written by the op when the copy starts), and its end requeues
// the SandboxFork (ForkReconciler.wake), whose next pass writes the status the op computed and
// creates the copies' Sandboxes. One op at most per SandboxFork (by UID). A SandboxFork deleted
// while its op runs cancels it and waits for it to end; what it made and nobody recorded is
// removed (undo).

// forkOpTimeout bounds a forkOp: a checkpoint, the copy and the restores.
const forkOpTimeout = CopyTimeout + 2*createTimeout

// forkOp is one fork under way for a SandboxFork.
type forkOp struct {
	done   chan struct{} // closed when the fields below are set
	cancel context.CancelFunc
	f      *zygov1.SandboxFork // the copy the op worked on: its status is the outcome
	res    ctrl.Result
	err    error
}

// forkOps tracks the forkOps by SandboxFork UID.
type forkOps struct {
	mu  sync.Mutex // guards ops
	ops map[types.UID]*forkOp
}

func (c *forkOps) get(uid types.UID) *forkOp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[uid]
}

func (c *forkOps) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ops, uid)
}

// ended reports whether op has ended, waiting for it at most wait.
func (op *forkOp) ended(wait time.Duration) bool {
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-op.done:
		case <-t.C:
		}
	}
	select {
	case <-op.done:
		return true
	default:
		return false
	}
}

// startFork runs r.fork on a copy of f in a goroutine of its own.
func (r *ForkReconciler) startFork(ctx context.Context, f *zygov1.SandboxFork) *forkOp {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forkOpTimeout)
	op := &forkOp{done: make(chan struct{}), cancel: cancel}
	r.ops.mu.Lock()
	if r.ops.ops == nil {
		r.ops.ops = map[types.UID]*forkOp{}
	}
	r.ops.ops[f.UID] = op
	r.ops.mu.Unlock()
	work := f.DeepCopy()
	key := f.DeepCopy()
	go func() {
		defer cancel()
		op.res, op.err = r.fork(cctx, work)
		op.f = work
		close(op.done)
		if r.wake != nil {
			select {
			case r.wake <- event.GenericEvent{Object: key}:
			case <-time.After(createTimeout): // nobody listens (the manager stopped)
			}
		}
	}()
	return op
}

// runFork starts f's fork (or finds it started by an earlier pass). Once it has ended it
// writes its outcome into f's status and creates the copies' Sandboxes; until then it
// requeues f.
func (r *ForkReconciler) runFork(ctx context.Context, f *zygov1.SandboxFork) (ctrl.Result, error) {
	op := r.ops.get(f.UID)
	if op == nil {
		op = r.startFork(ctx, f)
	}
	if !op.ended(createInlineWait) {
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	r.ops.forget(f.UID)
	before := f.DeepCopy()
	f.Status = *op.f.Status.DeepCopy()
	if err := r.Client.Status().Patch(ctx, f, client.MergeFrom(before)); err != nil {
		// The copies run and are not recorded: remove them rather than leave them behind.
		return ctrl.Result{}, errors.Join(op.err, fmt.Errorf("writing the status: %w", err), r.undo(ctx, op.f))
	}
	if op.err != nil || f.Status.CheckpointID == "" {
		return op.res, op.err
	}
	return op.res, r.ensureChildren(ctx, f)
}

// stopFork cancels f's fork, if one runs. It reports whether f must wait for it to end;
// once ended, what it made is removed (f is being deleted: nothing will record it).
func (r *ForkReconciler) stopFork(ctx context.Context, f *zygov1.SandboxFork) (bool, error) {
	op := r.ops.get(f.UID)
	if op == nil {
		return false, nil
	}
	op.cancel()
	if !op.ended(0) {
		return true, nil
	}
	r.ops.forget(f.UID)
	if f.Status.CheckpointID != "" {
		return false, nil // recorded: the deletion removes it as any fork's
	}
	return false, r.undo(ctx, op.f)
}
